"""The namespaces of an isolated job's switch and hosts: the process that holds each set
(:func:`hold`), the way into them (:func:`nsenter_argv`), and a host's own ``/opt/ml``."""

from __future__ import annotations

import shlex
import signal
import subprocess
from dataclasses import dataclass

from tenter.launch.shared.processes import process_identity
from tenter.runtime.parent_death import dies_with_parent


@dataclass
class Namespaces:
    """Namespaces and the process that holds them: ``proc`` where this process started it,
    else (a network re-opened from its record) only its pid and identity."""

    name: str
    pid: int
    identity: str
    """:func:`~tenter.launch.shared.processes.process_identity` of the holder: a record names the
    holder for good, even once its pid is reused."""
    proc: subprocess.Popen[bytes] | None = None


def hold(
    name: str,
    unshare: list[str],
    hostname: str,
    etc: dict[str, str],
    opt_ml: str | None,
    within: int | None,
) -> Namespaces:
    """A process in new namespaces (``unshare``'s flags) that sets them up, says ``ready``
    and sleeps until its creator dies: its hostname, and with a mount namespace its own
    ``/dev/shm``, the ``etc`` files (path in ``/etc`` -> file) bound in place and ``opt_ml``
    at ``/opt/ml``. ``within``: the pid whose user namespace it is created in."""
    # The UTS namespace's name, written where `hostname` would (one tool less to need).
    setup = 'echo "$1" > /proc/sys/kernel/hostname'
    if "--mount" in unshare:
        setup += " && mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs /dev/shm"
        for number, target in enumerate(etc, start=2):
            setup += f' && mount --bind "${{{number}}}" {shlex.quote(target)}'
        if opt_ml is not None:
            setup += f" && {mount_opt_ml(len(etc) + 2)}"
    script = f"{setup} && echo ready && exec sleep infinity"
    prefix = []
    if within is not None:
        prefix = [
            "nsenter",
            f"--target={within}",
            "--user",
            "--preserve-credentials",
            "--",
        ]
    argv = [
        *prefix,
        "unshare",
        *unshare,
        "--",
        "sh",
        "-c",
        script,
        "tenter-ns",
        hostname,
        *etc.values(),
        *([opt_ml] if opt_ml is not None else []),
    ]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=dies_with_parent(signal.SIGKILL),
    )
    assert proc.stdout is not None and proc.stderr is not None
    if proc.stdout.readline().strip() != b"ready":
        proc.kill()
        proc.wait()
        err = proc.stderr.read().decode(errors="replace").strip()
        raise OSError(f"cannot create the namespaces of {name}: {err or 'no reason given'}")
    proc.stdout.close()
    proc.stderr.close()
    return Namespaces(name, proc.pid, process_identity(proc.pid), proc)


def nsenter_argv(ns: Namespaces, user_namespace: bool, mount: bool, cwd: str | None) -> list[str]:
    """The argv prefix that runs a command in ``ns`` (its mount namespace too: ``mount``)."""
    argv = ["nsenter", f"--target={ns.pid}"]
    if user_namespace:
        argv += ["--user", "--preserve-credentials"]
    argv += ["--net", "--uts"]
    if mount:
        argv.append("--mount")
    if cwd is not None:
        argv.append(f"--wd={cwd}")
    return [*argv, "--"]


STAGE = "/dev/shm/.tenter-opt"
"""Where a host's new ``/opt`` is assembled: its own ``/dev/shm`` (a tmpfs of its mount
namespace), so that nothing is created in this machine's file system."""


def mount_opt_ml(arg: int) -> str:
    """The shell commands, run in a host's fresh mount namespace, that show it the folder in
    its positional argument ``arg`` at ``/opt/ml``. ``/opt/ml`` cannot be created in this
    machine's ``/opt``: a tmpfs is mounted in its place holding this machine's entries of
    ``/opt`` (bound back, links copied) and ``ml``. Gone with the namespace; a machine with
    no ``/opt`` directory gets none."""
    return (
        f"if [ -d /opt ]; then mkdir {STAGE} && mount -t tmpfs -o mode=755 tenter-opt {STAGE}"
        " && for e in /opt/* /opt/.[!.]*; do n=${e##*/}; case $n in ml|'*'|'.[!.]*') continue;;"
        f' esac; if [ -L "$e" ]; then cp -P "$e" {STAGE}/; else'
        f' {{ [ -d "$e" ] && mkdir "{STAGE}/$n" || touch "{STAGE}/$n"; }}'
        f' && mount --rbind "$e" "{STAGE}/$n"; fi || exit 1; done'
        # A spare host's tree is written when it joins: its folder may not exist yet.
        f' && mkdir -p "${{{arg}}}" {STAGE}/ml && mount --rbind "${{{arg}}}" {STAGE}/ml'
        f" && mount --move {STAGE} /opt && rmdir {STAGE}; fi"
    )
