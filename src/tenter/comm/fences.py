"""Memory ordering for the shared-memory flags, per CPU architecture.

The ranks of a host hand data over through flags (:mod:`tenter.comm.shm`): a writer
stores its data, then its flag; a reader sees the flag, then loads the data. That is
correct only if the flag store is a *release* (earlier loads and stores are visible
before it) and the flag load an *acquire* (later loads and stores happen after it).

* x86-64 (total store order): every plain store is a release and every plain load an
  acquire, so no fence is needed, just as C11 compilers emit none for acquire/release
  fences there. Python cannot reorder the stores either: each is its own C call.
* aarch64 (Graviton, Grace, Ampere): loads and stores may be reordered, so a peer could
  see the flag before the data. There a fence runs before each flag store and after each
  flag wait: libatomic's ``atomic_thread_fence`` (GCC's out-of-line C11 fence, symbol
  version ``LIBATOMIC_1.2`` of ``libatomic.so.1``), called through ctypes with
  ``__ATOMIC_SEQ_CST``: the full barrier (``dmb ish`` on aarch64; ``lock or`` on x86-64,
  as disassembling this machine's copy shows), which orders both ways. Python has no fence
  of its own, ``torch`` ops are not fences, glibc exports none, and ``libgcc_s`` has no
  ``__sync_synchronize``: libatomic is the one that needs no compiler at install time.
  Where it is missing, the backend refuses to start rather than risk silent corruption.
* Anything else is refused: nobody has checked the flag protocol or the futex calls there.
"""

from __future__ import annotations

import ctypes
import functools
import platform
from collections.abc import Callable
from dataclasses import dataclass

from tenter.comm.errors import CommPlatformError

LIBATOMIC = "libatomic.so.1"
_TOTAL_STORE_ORDER = frozenset({"x86_64", "amd64", "i386", "i686"})
_WEAKLY_ORDERED = frozenset({"aarch64", "arm64"})
_FIX = (
    "use the gloo backend instead: `process_group_backend: gloo` in the job spec, "
    'TENTER_PG_BACKEND=gloo, or init_process_group("gloo")'
)


def _no_fence() -> None:
    """Nothing to do: the architecture orders plain loads and stores as needed."""


@dataclass(frozen=True)
class Fences:
    """What the flag protocol calls around its flags."""

    release: Callable[[], None]
    """Called before a rank stores its flag (publishes what it wrote and read)."""
    acquire: Callable[[], None]
    """Called after a rank saw its peers' flags (before it reads what they wrote)."""
    source: str
    """Where the fence comes from, for docs and errors."""


NO_FENCES = Fences(_no_fence, _no_fence, "none needed (total store order)")


def libatomic_fences(library: str = LIBATOMIC) -> Fences:
    """Fences calling ``atomic_thread_fence`` of ``library``; raises ``OSError`` or
    ``AttributeError`` if it cannot be loaded or lacks the function."""
    # PyDLL keeps the GIL: dropping and retaking it would cost more than the fence.
    fence = ctypes.PyDLL(library).atomic_thread_fence
    fence.argtypes = [ctypes.c_int]
    fence.restype = None
    seq_cst = 5  # __ATOMIC_SEQ_CST: the full barrier, a release and an acquire at once
    full = functools.partial(fence, seq_cst)
    return Fences(full, full, f"atomic_thread_fence from {library}")


def fences_for(machine: str, library: str = LIBATOMIC) -> Fences:
    """The fences the flag protocol needs on ``machine`` (a ``platform.machine()`` value);
    raises :class:`CommPlatformError` where it cannot run correctly."""
    arch = machine.lower()
    if arch in _TOTAL_STORE_ORDER:
        return NO_FENCES
    if arch in _WEAKLY_ORDERED:
        try:
            return libatomic_fences(library)
        except (OSError, AttributeError) as e:
            raise CommPlatformError(
                f"tenter.comm: the 'tenter' backend needs a memory fence on {machine} "
                f"and could not load atomic_thread_fence from {library} ({e}). Install "
                f"libatomic (Debian/Ubuntu: apt-get install libatomic1; RHEL/Amazon "
                f"Linux: dnf install libatomic), or {_FIX}."
            ) from e
    raise CommPlatformError(
        f"tenter.comm: the 'tenter' backend does not support the {machine!r} architecture "
        f"(it runs on x86_64 and aarch64); {_FIX}."
    )


def this_machine_fences() -> Fences:
    """:func:`fences_for` this machine; checked when each process group is created."""
    return fences_for(platform.machine())
