"""Stop requests: SIGINT, SIGTERM and SIGHUP turned into an event the launcher's loop polls.

SIGTERM is what Slurm, Kubernetes and spot reclaims send before they kill a job: it asks for
a preemption (stop at the next step boundary after a final checkpoint, within the spec's
``checkpoint.preemption_grace``). SIGINT (Ctrl-C) and SIGHUP stop the job now; either one
after a SIGTERM turns the preemption into that.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
PREEMPT_SIGNAL = signal.SIGTERM


class StopRequest(threading.Event):
    """Set by a stop signal; :attr:`preempt` tells a preemption (SIGTERM) from a stop now."""

    def __init__(self) -> None:
        super().__init__()
        self.preempt = False

    def on_signal(self, signum: int, frame: FrameType | None = None) -> None:
        self.preempt = signum == PREEMPT_SIGNAL and (self.preempt or not self.is_set())
        self.set()


def is_preemption(stop: threading.Event) -> bool:
    """Whether ``stop`` asks for a preemption rather than a stop now."""
    return isinstance(stop, StopRequest) and stop.preempt


def hold_stop_signals() -> None:
    """Block :data:`STOP_SIGNALS` (a ``preexec_fn``): a launcher started so receives a stop
    sent before it could handle one (``cancel`` at once after ``--detach``) once
    :func:`stop_requests` has its handlers in place, instead of dying of it, summary-less."""
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


@contextlib.contextmanager
def stop_requests() -> Iterator[StopRequest]:
    """An event set by SIGINT/SIGTERM/SIGHUP while the job runs (signals reach the main thread
    only; elsewhere, e.g. ``Estimator.fit`` in a thread, the caller's handlers stay)."""
    requested = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield requested
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in previous:
        signal.signal(sig, requested.on_signal)
    # Held ones (hold_stop_signals) arrive now; the job's processes start with none blocked.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    try:
        yield requested
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
