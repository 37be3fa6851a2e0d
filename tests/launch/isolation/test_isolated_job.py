"""Jobs on isolated hosts (``isolation: network``): what the workers see, that tenter.comm
shares memory only within a host, and that nothing is left however the job ends."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tenter.contract.isolation import host_addr
from tenter.errors import ExitCode, JobNotFoundError
from tenter.launch.launcher.isolation.record import attach
from tenter.runtime.warm import WAIT_FLAG
from tests.conftest import (
    REPO,
    SCRIPTS,
    Background,
    assert_golden,
    assert_network_gone,
    assert_nothing_left,
    job_processes,
    tenter,
)
from tests.launch.specs import joinable_spec, write_spec

pytestmark = pytest.mark.slow

GOLDEN = Path(__file__).parent / "golden"
GRACE_S = 2
"""The stop grace period these tests run with (TENTER_STOP_GRACE_S), to keep them short."""
SLACK_S = 10


def on_two_hosts(procs_per_host: int, *args: str) -> list[str]:
    """``tenter run`` on two isolated hosts."""
    hosts = ["--hosts", "2", "--procs-per-host", str(procs_per_host)]
    return ["run", *hosts, "--isolation", "network", *args]


@pytest.fixture(autouse=True)
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENTER_STOP_GRACE_S", str(GRACE_S))


def test_plan_shows_the_hosts_addresses_interface_gpus_and_store_on_the_bridge(
    monkeypatch: pytest.MonkeyPatch, fake_gpus: Callable[[int], Path]
) -> None:
    # A fixed home: the plan's long values are cut at a length that must not depend on where
    # the test runs. A plan creates nothing there. Eight GPUs, whatever this machine has.
    fake_gpus(8)
    home = Path("/nonexistent/tenter-home")
    monkeypatch.setenv("TENTER_HOME", str(home))
    done = tenter(
        "plan",
        "--hosts",
        "2",
        "--procs-per-host",
        "2",
        "--isolation",
        "network",
        "--job-id",
        "golden-job",
        # A catalog type rehearsed here: its hosts' share of this machine's cores (threads per
        # rank, SM_NUM_CPUS) depends on the machine, written as $SHARE.
        "--instance-type",
        "ml.c5.18xlarge",
        "--source-dir",
        str(SCRIPTS),
        "dump_env.py",
    )
    assert done.returncode == 0, done.stderr
    text = done.stdout.replace(sys.executable, "$PYTHON").replace(str(REPO), "$REPO")
    text = re.sub(r"(OMP_NUM_THREADS=)\d+", r"\1$SHARE", text)
    text = re.sub(r"(SM_NUM_CPUS=)\d+(.*share: )\d+", r"\1$SHARE\2$SHARE", text)
    # The job's checkpoint folder is named by what it runs, the repository's path among it.
    text = re.sub(r"(checkpoints/tenter-dump-env-)[0-9a-f]{8}", r"\1$IDENTITY", text)
    assert_golden(GOLDEN / "plan-2x2.txt", text)
    assert not home.exists()


def test_workers_see_their_host_and_share_memory_only_within_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    spec = write_spec(
        tmp_path,
        "host_view.py",
        instance_count=2,
        processes_per_host=2,
        isolation="network",
        process_group_backend="tenter",
        args=[str(out)],
    )
    done = tenter("run", str(spec))
    assert done.returncode == 0, done.stderr
    assert "rendezvous: 2 hosts (algo-1, algo-2), world size 4" in done.stderr
    # Peers' addresses resolve to names (the hosts' /etc/hosts): torch has nothing to warn of.
    assert "cannot be retrieved" not in done.stderr
    views = [json.loads((out / f"rank-{rank}.json").read_text()) for rank in range(4)]
    for rank, view in enumerate(views):
        host = rank // 2
        assert view["hostname"] == f"algo-{host + 1}"
        assert view["interfaces"] == {"lo": ["127.0.0.1"], "eth0": [host_addr(host)]}
        assert view["resolves"] == {"algo-1": host_addr(0), "algo-2": host_addr(1)}
        env = view["env"]
        assert env["MASTER_ADDR"] == "198.18.100.1"
        assert env["TENTER_HOST_ADDR"] == host_addr(host)
        for name in ("SM_NETWORK_INTERFACE_NAME", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            assert env[name] == "eth0", name
    # The two ranks of a host map one segment; the hosts' segments are apart, each in the
    # host's own /dev/shm (a device of its own, not this machine's).
    assert views[0]["segments"] and views[0]["segments"] == views[1]["segments"]
    assert views[2]["segments"] and views[2]["segments"] == views[3]["segments"]
    assert not set(views[0]["segments"]) & set(views[2]["segments"])
    devices = {view["shm_device"] for view in views}
    assert len(devices) == 2 and os.stat("/dev/shm").st_dev not in devices
    assert_nothing_left(done.job_dir)


def test_the_digits_example_trains_on_isolated_hosts() -> None:
    done = tenter(
        "run", str(REPO / "examples/digits/job.yaml"), "--isolation", "network", "--hp", "epochs=2"
    )
    assert done.returncode == 0, done.stderr
    assert "rendezvous: 2 hosts (algo-1, algo-2), world size 4" in done.stderr
    assert "[algo-1,0]<stdout>: epoch   2" in done.stdout
    assert (done.job_dir / "hosts/algo-1/model/model.pt").exists()
    assert_nothing_left(done.job_dir)


def test_a_failed_job_leaves_no_namespace() -> None:
    done = tenter(*on_two_hosts(2, "--env", "FAIL_MODE=raise", str(SCRIPTS / "fail.py")))
    assert done.returncode == ExitCode.JOB_FAILED, done.stderr
    assert "ValueError: boom at step 3" in done.stderr
    assert_nothing_left(done.job_dir)


def blocked_job() -> Background:
    job = Background(*on_two_hosts(1, str(SCRIPTS / "block.py")))
    job.wait_for("ready", count=2)
    return job


def test_another_process_attaches_to_the_running_network_until_the_job_ends() -> None:
    job = blocked_job()
    network = attach(job.job_dir)
    hostname = subprocess.run(
        [*network.enter("algo-2"), "hostname"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert hostname.stdout.strip() == "algo-2"
    assert not network.is_partitioned("algo-2")
    network.close()  # lets go of it: the job goes on
    assert job.proc.poll() is None
    # Ctrl-C: the launcher stops the job, and takes its network along.
    job.proc.send_signal(signal.SIGINT)
    out = job.finish()
    assert job.proc.returncode == ExitCode.INTERRUPTED, out
    assert_nothing_left(job.job_dir)
    with pytest.raises(JobNotFoundError, match="the job's host network is gone"):
        attach(job.job_dir)


def test_a_killed_launcher_leaves_no_namespace() -> None:
    job = blocked_job()
    procs = job_processes(job.job_dir.name)
    # The store, two agents, two workers; and each agent's warm template and spares (titled
    # ``python -m tenter.runtime.bootstrap --warm ...``, one argument).
    not_warm = [p for p in procs if WAIT_FLAG not in " ".join(p.cmdline()).split()]
    assert len(not_warm) == 5, [p.cmdline() for p in not_warm]
    job.proc.kill()
    job.finish()
    # No launcher, no sweep: the namespaces' holders die with it (their parent-death signal);
    # the agents stop their workers, and the last process of each namespace takes it along.
    _, alive = psutil.wait_procs(procs, timeout=GRACE_S + SLACK_S)
    assert alive == [], [p.cmdline() for p in alive]
    assert_network_gone(job.job_dir)
    assert list(Path("/dev/shm").glob(f"*{job.job_dir.name}*")) == []


def test_a_host_joins_a_running_job_on_its_own_namespaces(tmp_path: Path) -> None:
    spec = joinable_spec(tmp_path, isolation="network")
    job = Background("run", str(spec))
    job.wait_for("ready world 1 rank 0")
    assert list(json.loads((job.job_dir / "network.json").read_text())["hosts"]) == ["algo-1"]
    joined = tenter("join", job.job_dir.name)
    assert joined.returncode == 0, joined.stderr
    out = job.finish()
    assert job.proc.returncode == 0, out
    assert "rendezvous: 2 hosts (algo-1, algo-2), world size 2" in out
    assert "[algo-2,1]<stdout>: done world 2 rank 1" in out
    record = json.loads((job.job_dir / "network.json").read_text())
    assert list(record["hosts"]) == ["algo-1", "algo-2"]
    assert_nothing_left(job.job_dir)
