"""Private job directories: a job's directory and its checkpoint folder are its user's alone
(``0700``), or its user's and one group's (``output_group``: ``2750``, the setgid bit making
what is created inside the group's), on a shared file system too. Every process of the job
(agents, ranks, mpirun's shims) runs under a umask that keeps what it writes the same.

The folder's own mode is what guards: another user cannot enter it, whatever the modes of
the files inside; the umask keeps a file private even where one is moved or the folder's mode
is opened later. The servers a job runs beyond loopback ask for a per-job token
(:func:`authorized`).
"""

from __future__ import annotations

import grp
import hmac
import os
import secrets
from pathlib import Path

from tenter.errors import TenterError

PRIVATE_MODE = 0o700
GROUP_MODE = 0o2750


def umask_for(group: str) -> int:
    """The umask of a job's processes: nothing for others, the group reads with ``group``."""
    return 0o027 if group else 0o077


def enter(group: str) -> None:
    """Make this process (and what it starts) create files as the job's are kept."""
    os.umask(umask_for(group))


def group_id(group: str) -> int:
    """The id of ``group``; bad input naming ``output_group`` when there is none."""
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise TenterError(
            "output_group",
            f"there is no group '{group}' on this machine",
            "give a group you belong to (`id -Gn` lists them), or leave output_group out",
        ) from None


def make_dirs(folder: Path, group: str) -> None:
    """Create ``folder`` and the folders above it that are missing, each as
    :func:`make_private` leaves it (the group's members must pass through them)."""
    missing = [p for p in (folder, *folder.parents) if not p.exists()]
    for path in reversed(missing):
        path.mkdir(mode=PRIVATE_MODE, exist_ok=True)
        make_private(path, group)
    if folder.stat().st_uid == os.getuid():  # a folder someone else made is theirs
        make_private(folder, group)


def make_private(folder: Path, group: str) -> None:
    """``folder`` for its owner only, or for ``group`` to read as well."""
    if group:
        os.chown(folder, -1, group_id(group))
        folder.chmod(GROUP_MODE)
    else:
        folder.chmod(PRIVATE_MODE)


TOKEN_ENV = "TENTER_JOB_TOKEN"
"""Where a job's own processes hold the token of the servers the job runs beyond loopback:
in their environment (passed by name, never on a command line), never in a file of the plan."""


def new_token() -> str:
    """A per-job token: 256 random bits."""
    return secrets.token_urlsafe(32)


def bearer(token: str) -> dict[str, str]:
    """The request header that carries ``token``."""
    return {"Authorization": f"Bearer {token}"}


def write_token(path: Path, token: str) -> None:
    """``token`` in a file only its user can read (made so, never widened after)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)


def authorized(header: str | None, token: str) -> bool:
    """``header`` (an ``Authorization`` value) carries ``token``; compared in constant time,
    so that the reply's timing tells nothing of the token."""
    given = (header or "").removeprefix("Bearer ").encode()
    return hmac.compare_digest(given, token.encode())
