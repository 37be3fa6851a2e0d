"""Isolation that cannot run here is refused before anything is created: the reason, the fix,
exit 2 (exit 5 for a missing tool), no traceback, no job directory, no namespace."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tenter.errors import ExitCode
from tests.conftest import REPO, SCRIPTS, Finished, own_children, tenter

RUN_ISOLATED = ("run", "--isolation", "network", str(SCRIPTS / "dump_env.py"), "out")


def assert_refused(done: Finished, code: int, *texts: str) -> None:
    assert done.returncode == code, done.stderr
    for text in texts:
        assert text in done.stderr
    assert "Traceback" not in done.stderr
    assert not (Path(os.environ["TENTER_HOME"]) / "jobs").exists()
    assert own_children() == []


def tenter_in(prefix: list[str], *args: str, env: dict[str, str] | None = None) -> Finished:
    """The tenter CLI run under ``prefix`` (a command that changes what the process may do)."""
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "tenter", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )
    return Finished(proc.returncode, proc.stdout, proc.stderr)


def test_without_root_or_user_namespaces_isolation_is_refused() -> None:
    # Root of a user namespace of its own, where user namespaces are then switched off
    # (user.max_user_namespaces = 0), running tenter without any capability: as root in
    # a locked-down container, it can make neither namespaces nor a user namespace.
    prefix = [
        "unshare",
        "--user",
        "--map-root-user",
        "sh",
        "-c",
        'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"',
        "sh",
        "setpriv",
        "--bounding-set=-all",
        "--inh-caps=-all",
    ]
    done = tenter_in(prefix, *RUN_ISOLATED)
    assert_refused(
        done,
        ExitCode.BAD_INPUT,
        "isolation: network: needs root or unprivileged user namespaces",
        "user.max_user_namespaces = 0",
        "sysctl -w kernel.unprivileged_userns_clone=1",
        "--isolation none",
    )


def test_missing_tools_are_named_with_their_package(tmp_path: Path) -> None:
    # A PATH with everything tenter and Python need, but not iproute2's `ip`.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("nsenter", "unshare", "sh"):
        found = shutil.which(tool)
        assert found is not None
        (bin_dir / tool).symlink_to(found)
    done = tenter_in([], *RUN_ISOLATED, env={"PATH": str(bin_dir)})
    assert_refused(
        done,
        ExitCode.MISSING_TOOL,
        "isolation: network: needs ip, not found on PATH",
        "apt-get install iproute2",
    )


def test_an_interface_in_the_hosts_range_is_refused() -> None:
    # A network namespace of its own whose interface has an address in 198.18.0.0/15, as a
    # machine whose own network uses that range.
    setup = (
        "ip link add tenter-test type veth peer name tenter-peer && "
        "ip addr add 198.19.0.1/16 dev tenter-test && ip link set lo up && "
        'exec "$@"'
    )
    done = tenter_in(["unshare", "--net", "sh", "-c", setup, "sh"], *RUN_ISOLATED)
    assert_refused(
        done,
        ExitCode.BAD_INPUT,
        "isolation: network: this machine's interface tenter-test has an address in 198.18.0.0/15",
        "ip addr del",
    )


@pytest.mark.parametrize(
    ("flags", "text"),
    [
        (
            ["--hosts", "157"],
            "instance_count: 157 hosts exceed the 156 isolated hosts that fit the address range",
        ),
        (
            ["--backend", "slurm"],
            "isolation: network needs hosts simulated on this machine, and the slurm backend",
        ),
    ],
)
def test_what_isolation_cannot_plan_is_refused(flags: list[str], text: str) -> None:
    done = tenter(*RUN_ISOLATED[:3], *flags, *RUN_ISOLATED[3:])
    assert_refused(done, ExitCode.BAD_INPUT, text)
