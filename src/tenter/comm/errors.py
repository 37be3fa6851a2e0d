"""Errors raised by the ``tenter`` collective backend.

Every error names the collective, its sequence number in the process group and the ranks
involved, so that a hang or a desynchronised program points at the line that diverged.
"""

from __future__ import annotations


class CommError(RuntimeError):
    """Base class of every error of :mod:`tenter.comm`."""


class CommTimeoutError(CommError, TimeoutError):
    """A collective did not complete within the process group's timeout.

    ``missing`` holds the group ranks that never arrived.
    """

    def __init__(self, message: str, missing: list[int]) -> None:
        super().__init__(message)
        self.missing = missing


class CommPeerDiedError(CommError):
    """A rank of this host exited while the others waited for it in a collective."""


class CollectiveMismatchError(CommError):
    """Ranks called different collectives (or the same one with different sizes, dtypes,
    reduce ops or roots) at the same sequence number."""


class CommShutdownError(CommError):
    """The process group was shut down or is unusable after an earlier error."""


class CommPlatformError(CommError):
    """The backend cannot run correctly on this machine (architecture or missing fence)."""
