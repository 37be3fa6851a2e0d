"""Can this machine run isolated hosts? Checked before anything of the job is created.

Namespaces are made directly where this process may (root, with CAP_SYS_ADMIN), else inside a
user namespace of their own (an unprivileged user, where the kernel allows user namespaces).
Each is tried for real (``unshare ... true``: a few milliseconds) rather than guessed from
the user id: root in a container without CAP_SYS_ADMIN cannot, and a kernel may refuse user
namespaces through more than one setting.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tenter.contract.isolation import SUBNET
from tenter.errors import MissingToolError, TenterError
from tenter.launch.launcher.isolation.network import interfaces_in

TOOLS = {"ip": "iproute2", "nsenter": "util-linux", "unshare": "util-linux"}
"""The programs the host network is made with, and their Debian packages."""
MAX_USER_NAMESPACES = Path("/proc/sys/user/max_user_namespaces")
UNPRIVILEGED_USERNS_CLONE = Path("/proc/sys/kernel/unprivileged_userns_clone")
"""Debian and Ubuntu kernels' own switch; other kernels have no such file."""
WHERE = "isolation"


def _can(*unshare: str) -> bool:
    done = subprocess.run(
        ["unshare", *unshare, "true"], capture_output=True, timeout=10, check=False
    )
    return done.returncode == 0


def _sysctl(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def _user_namespaces_allowed() -> bool:
    return (_sysctl(MAX_USER_NAMESPACES) or 0) > 0 and _sysctl(UNPRIVILEGED_USERNS_CLONE) != 0


def check_tools() -> None:
    missing = sorted(tool for tool in TOOLS if shutil.which(tool) is None)
    if missing:
        packages = sorted({TOOLS[tool] for tool in missing})
        raise MissingToolError(
            WHERE,
            f"network: needs {', '.join(missing)}, not found on PATH",
            f"install them (Debian: apt-get install {' '.join(packages)}), or run without "
            "isolation (--isolation none)",
        )


def user_namespace_needed() -> bool:
    """Whether the namespaces must be made inside a user namespace (no privilege of our
    own); raises :class:`~tenter.errors.TenterError` (bad input) where neither way works."""
    if _can("--net", "--uts", "--mount"):
        return False
    if _user_namespaces_allowed() and _can("--user", "--map-root-user", "--net", "--uts"):
        return True
    who = "root without CAP_SYS_ADMIN" if os.geteuid() == 0 else f"user {os.geteuid()}"
    settings = f"user.max_user_namespaces = {_sysctl(MAX_USER_NAMESPACES)}" + (
        f", kernel.unprivileged_userns_clone = {_sysctl(UNPRIVILEGED_USERNS_CLONE)}"
        if UNPRIVILEGED_USERNS_CLONE.exists()
        else ""
    )
    raise TenterError(
        WHERE,
        f"network: needs root or unprivileged user namespaces, and this process ({who}) "
        f"can create neither namespaces nor a user namespace ({settings})",
        "run tenter as root, or allow user namespaces (as root: sysctl -w "
        "kernel.unprivileged_userns_clone=1 and sysctl -w user.max_user_namespaces=15000; "
        "in a container: run it with --privileged or without the seccomp profile that "
        "blocks unshare), or run without isolation (--isolation none)",
    )


def check_addresses() -> None:
    """This machine's own interfaces must not use the hosts' range: a packet meant for a
    host could leave on them."""
    taken = interfaces_in(SUBNET)
    if taken:
        raise TenterError(
            WHERE,
            f"network: this machine's interface {', '.join(sorted(set(taken)))} has an address "
            f"in {SUBNET}, the range isolated hosts use",
            "remove that address (ip addr del ADDR dev IFACE), or run without isolation "
            "(--isolation none)",
        )


def check_machine() -> bool:
    """Every check, cheapest first; returns :func:`user_namespace_needed`'s answer."""
    check_tools()
    check_addresses()
    return user_namespace_needed()
