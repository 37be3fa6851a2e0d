"""Real multi-host mpirun on one machine: the mpirun command line a cluster runs over ssh,
on isolated hosts, with only Open MPI's remote shell (``plm_rsh_agent``) replaced by
``python -m tenter.launch.launcher.isolation.rsh``, which enters the host's namespaces."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tenter.contract.isolation import SWITCH_ADDR, host_addr
from tenter.contract.plan import Plan
from tenter.errors import ExitCode
from tenter.launch.launcher.isolation import record
from tenter.launch.launcher.isolation.network import HostNetwork
from tenter.launch.launcher.isolation.rsh import NETWORK_ENV, UNREACHABLE
from tests.conftest import (
    REPO,
    SCRIPTS,
    SHORT_STOP_GRACE_S,
    Background,
    assert_network_gone,
    assert_nothing_left,
    job_processes,
    tenter,
)

ISOLATED_MPI = ("run", "--backend", "mpi", "--isolation", "network")


def _values(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == flag]


@pytest.mark.slow
def test_each_host_runs_its_ranks_in_its_own_namespaces() -> None:
    done = tenter(
        *ISOLATED_MPI, "--hosts", "2", "--procs-per-host", "2", str(SCRIPTS / "whereami.py")
    )
    assert done.returncode == 0, done.stderr
    for rank in range(4):
        host = rank // 2
        assert (
            f"[algo-{host + 1},{rank}]<stdout>: rank {rank} of 4 on algo-{host + 1} as "
            f"algo-{host + 1} at {host_addr(host)} nic eth0: all_reduce ok"
        ) in done.stdout
    plan = Plan.from_json((done.job_dir / "plan.json").read_text())
    argv = plan.launcher
    # A cluster's command line: each context on its host, Open MPI's traffic on eth0...
    assert _values(argv, "--host") == ["algo-1:2", "algo-2:2"]
    mca = {argv[i + 1]: argv[i + 2] for i, arg in enumerate(argv) if arg == "--mca"}
    assert mca["btl_tcp_if_include"] == mca["oob_tcp_if_include"] == "eth0"
    # ... and only the remote shell replaced; the ranks find the launcher's store on the switch.
    assert mca["plm_rsh_agent"] == f"{sys.executable} -m tenter.launch.launcher.isolation.rsh"
    assert _values(argv, "-x").count(f"MASTER_ADDR={SWITCH_ADDR}") == 2
    assert_nothing_left(done.job_dir)


@pytest.mark.slow
def test_digits_trains_through_mpirun_across_isolated_hosts() -> None:
    done = tenter(
        *ISOLATED_MPI, str(REPO / "examples/digits/job.yaml"), "--procs-per-host", "1",
        "--hp", "epochs=2",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "training on 2 ranks" in done.stdout
    assert (done.job_dir / "hosts/algo-1/model/model.pt").exists()
    assert_nothing_left(done.job_dir)


@pytest.mark.slow
def test_a_rank_failing_on_the_remote_host_is_the_root_cause() -> None:
    done = tenter(
        *ISOLATED_MPI, "--hosts", "2", "--procs-per-host", "1", str(SCRIPTS / "fail_last.py"),
    )  # fmt: skip
    assert done.returncode == ExitCode.JOB_FAILED, done.stderr
    summary = done.stderr[done.stderr.index("FAILED after") :]
    assert "root cause: rank 1 on host algo-2 (local rank 0" in summary
    assert "ValueError: boom at step 3" in summary
    assert_nothing_left(done.job_dir)


def _rsh(*argv: str, network_dir: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != NETWORK_ENV}
    if network_dir is not None:
        env[NETWORK_ENV] = network_dir
    return subprocess.run(
        [sys.executable, "-m", "tenter.launch.launcher.isolation.rsh", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_the_rsh_agent_runs_a_shell_line_on_the_host_named_or_addressed(tmp_path: Path) -> None:
    with HostNetwork(["algo-1", "algo-2"]) as net:
        record.write(net, str(tmp_path))
        # As ssh does: the words after the host are one shell line, its values quoted.
        for host in ("algo-2", host_addr(1)):
            done = _rsh(host, "echo", '"$(hostname)"', "'a b'", network_dir=str(tmp_path))
            assert (done.returncode, done.stdout) == (0, "algo-2 a b\n"), done.stderr
        assert _rsh("algo-1", "exit 7", network_dir=str(tmp_path)).returncode == 7
        unknown = _rsh("algo-3", "true", network_dir=str(tmp_path))
        assert unknown.returncode == UNREACHABLE
        assert f"rsh: algo-3: no such host in {tmp_path}/network.json" in unknown.stderr
    unset = _rsh("algo-1", "true", network_dir=None)
    assert unset.returncode == UNREACHABLE and f"{NETWORK_ENV}: not set" in unset.stderr
    gone = _rsh("algo-1", "true", network_dir=str(tmp_path))  # its holders ended
    assert gone.returncode == UNREACHABLE and "the job's host network is gone" in gone.stderr


@pytest.mark.slow
def test_perf_all_reduce_through_mpirun_across_isolated_hosts() -> None:
    done = tenter(
        "perf", "all_reduce", "-b", "8", "-e", "64", "-n", "2", "-w", "1",
        "--launcher", "mpi", "--isolation", "network", "--hosts", "2", "--procs-per-host", "1",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "# Out of bounds values : 0 OK" in done.stdout
    plan = Plan.from_json((done.job_dir / "plan.json").read_text())
    assert _values(plan.launcher, "--host") == ["algo-1:1", "algo-2:1"]
    assert_nothing_left(done.job_dir)


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "sigkill"])
def test_a_stopped_or_killed_launcher_leaves_nothing_on_any_host(
    how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if how == "sigkill":
        # The remote-shell session's stop of orted, cut off from mpirun, waits out the stop
        # grace before its SIGKILL: 11 s of the test at the default 10 s, 3 s at this.
        monkeypatch.setenv("TENTER_STOP_GRACE_S", str(SHORT_STOP_GRACE_S))
    job = Background(
        *ISOLATED_MPI, "--hosts", "2", "--procs-per-host", "1", str(SCRIPTS / "block.py")
    )
    job.wait_for("ready 0", "ready 1")
    procs = job_processes(job.job_dir.name)
    # The orted that mpirun started on algo-2 through the rsh helper carries the job's id.
    assert any(p.name() == "orted" for p in procs), [p.cmdline() for p in procs]
    if how == "ctrl-c":
        job.proc.send_signal(signal.SIGINT)
        assert job.proc.wait(timeout=60) == ExitCode.INTERRUPTED, job.finish()
        job.finish()
        assert_nothing_left(job.job_dir)
        return
    job.proc.kill()
    job.finish()
    # No sweep: mpirun and the namespaces' holders die with the launcher (parent-death
    # signals); mpirun's remote-shell session then stops the orted on algo-2, which could
    # not hear from mpirun any more (the network went with the launcher), and its rank.
    _, alive = psutil.wait_procs(procs, timeout=60)
    assert alive == [], [p.cmdline() for p in alive]
    assert_network_gone(job.job_dir)
    # The sessions removed their temporary directories (orted's session directory), and the
    # last one the launcher's directory of them.
    assert list(Path(os.environ["TMPDIR"]).iterdir()) == []
