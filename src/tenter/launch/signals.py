"""Stop requests: SIGINT, SIGTERM and SIGHUP turned into an event the launcher's loop polls."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def stop_requests() -> Iterator[threading.Event]:
    """An event set by SIGINT/SIGTERM/SIGHUP while the job runs (signals reach the main thread
    only; elsewhere, e.g. ``Estimator.fit`` in a thread, the caller's handlers stay)."""
    requested = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield requested
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    for sig in previous:
        signal.signal(sig, lambda *_: requested.set())
    try:
        yield requested
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
