"""The kernel's signal to a process when its parent dies (``PR_SET_PDEATHSIG``).

Worker-side (tenter's mpirun shim, a warm template's forked spares) and launcher-side
(agents, workers, test clusters) alike: it lives here, below the launcher, so that both
sides arm it the same way.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1
# Resolved before any fork: the child between fork and exec should only make the call.
_prctl = ctypes.CDLL(None, use_errno=True).prctl


def dies_with_parent(sig: signal.Signals, starter: int | None = None) -> Callable[[], None]:
    """A ``preexec_fn`` that has the kernel send ``sig`` to the child when the thread that
    started it dies, however it dies (SIGKILL included, which no watcher in the parent could
    report). It runs in the child between fork and exec (the setting survives exec); a parent
    already gone by then is caught by comparing the child's parent with the starter (this
    process, or ``starter``: a process arming itself names its own parent)."""
    starter = os.getpid() if starter is None else starter

    def arm() -> None:
        if _prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
        if os.getppid() != starter:
            os.kill(os.getpid(), sig)

    return arm
