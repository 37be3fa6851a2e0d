"""Real multi-node Slurm on one machine: slurmctld on the switch (the login node), one slurmd
per host namespace (tests/launch/slurm_cluster.py), and tenter run from the login node puts
each host of the plan on its own node, across a real network."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tenter.errors import ExitCode
from tenter.launch.launcher.isolation.network import host_addr
from tests.conftest import REPO, SCRIPTS, job_dirs, job_processes
from tests.launch.etcd_server import etcd_server
from tests.launch.slurm_cluster import SlurmNodes, cancel_when_ready, slurm_nodes, wait_until
from tests.launch.specs import write_spec

pytestmark = pytest.mark.slow

DIGITS = REPO / "examples" / "digits"
NODES = 4
ETCD_HOST = "etcd"
"""A host of the same network that is no Slurm node: where the etcd server runs."""


@pytest.fixture(scope="module")
def cluster() -> Iterator[SlurmNodes]:
    with slurm_nodes(NODES, others=[ETCD_HOST]) as nodes:
        yield nodes


def _assert_job_gone(cluster: SlurmNodes, job_dir: Path) -> None:
    """Nothing of the job anywhere: not in Slurm's queue, no process on any node."""
    assert cluster.queue() == []
    wait_until("the job's processes to end", lambda: job_processes(job_dir.name) == [])

    def only_slurmd() -> bool:
        left = [p.name() for node in cluster.nodes for p in cluster.processes_on(node.name)]
        return left == ["slurmd"] * len(cluster.nodes)

    wait_until("only slurmd on every node (its job steps ended)", only_slurmd)


def test_each_host_of_the_plan_runs_on_its_own_node(cluster: SlurmNodes) -> None:
    done = cluster.tenter(
        "run", "--backend", "slurm", "--hosts", str(NODES), "--procs-per-host", "1",
        str(SCRIPTS / "whereami.py"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    logs = cluster.tenter("logs", done.job_dir.name)
    for rank in range(NODES):
        # Rank r on the r-th node: its own hostname, address and interface (eth0, not lo).
        line = (
            f"[algo-{rank + 1},{rank}]<stdout>: rank {rank} of {NODES} on node-{rank + 1} "
            f"as algo-{rank + 1} at {host_addr(rank)} nic eth0: all_reduce ok"
        )
        assert line in logs.stdout, logs.stdout
        assert (done.job_dir / f"logs/agent-algo-{rank + 1}.log").stat().st_size > 0
    summary = json.loads((done.job_dir / "summary.json").read_text())
    assert summary["rdzv_endpoint"].startswith(f"{host_addr(0)}:")
    _assert_job_gone(cluster, done.job_dir)


def test_digits_trains_across_two_nodes(cluster: SlurmNodes) -> None:
    done = cluster.tenter(
        "run", "--backend", "slurm", str(DIGITS / "job.yaml"), "--hosts", "2",
        "--procs-per-host", "1", "--hp", "epochs=3",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    metrics = json.loads((done.job_dir / "hosts/algo-1/model/metrics.json").read_text())
    assert metrics["test_accuracy"] >= 0.9  # 0.94 on one machine, the same seed and batches
    assert "training on 2 ranks" in done.stdout
    _assert_job_gone(cluster, done.job_dir)


def test_a_rank_failing_on_the_last_node_is_the_root_cause(cluster: SlurmNodes) -> None:
    done = cluster.tenter(
        "run", "--backend", "slurm", "--hosts", "3", "--procs-per-host", "1",
        str(SCRIPTS / "fail_last.py"),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    summary = done.stderr[done.stderr.index("FAILED after") :]
    assert "Slurm job state: FAILED" in summary
    assert "root cause: rank 2 on host algo-3 (local rank 0" in summary
    assert "ValueError: boom at step 3" in summary
    _assert_job_gone(cluster, done.job_dir)


HANG_TIMEOUT_S = 2
REPORT_AFTER_VERDICT_S = 2.0
"""As on the local backend (tests/launch/test_faults.py): the check's period and the ranks'
stacks, here through their agents (each looks at the control folder every 0.1 s)."""
END_AFTER_REPORT_S = 4.0
"""The agents' stop, the srun step's end and the next squeue of ``tenter run``'s wait (0.5 s)."""


def test_a_rank_hanging_on_the_last_node_is_named_and_ends_the_job(
    cluster: SlurmNodes, tmp_path: Path
) -> None:
    """The job's hang watch runs in the first node's agent: it reads every node's ranks
    summary, asks the last node's agent for its rank's stacks, and stops the job."""
    spec = write_spec(
        tmp_path,
        "loop.py",
        backend="slurm",
        instance_count=2,
        processes_per_host=1,
        environment={"STALL_RANK": "1"},  # rank 1, on node-2, stops stepping at step 5
        elastic={"hang_timeout": HANG_TIMEOUT_S},
    )
    done = cluster.tenter("run", str(spec), timeout=60)
    assert done.returncode == ExitCode.HANG, done.stdout + done.stderr
    report = done.job_dir / "hang-report.txt"
    hang = report.read_text()
    assert re.search(r"suspect: rank 1 on algo-2 \(pid \d+, \w+\): behind: all_reduce", hang)
    assert "suspect: rank 0" not in hang
    # Its stack, which its own node's agent asked for.
    script = (SCRIPTS / "loop.py").read_text().splitlines()
    stall_line = script.index("            threading.Event().wait()") + 1
    assert f'File "{SCRIPTS / "loop.py"}", line {stall_line} in <module>' in hang
    summary = json.loads((done.job_dir / "summary.json").read_text())
    assert summary["state"] == "hang" and "suspect: rank 1 on algo-2" in done.stderr
    # How long before the report the newest progress was (its ranks' "... s ago"), less the
    # timeout: how late after the verdict's time the report was made.
    late = min(float(ago) for ago in re.findall(r"([\d.]+) s ago", hang)) - HANG_TIMEOUT_S
    assert late <= REPORT_AFTER_VERDICT_S, f"{late:.1f} s\n{hang}"
    reported = report.stat().st_mtime
    ended = (done.job_dir / "summary.json").stat().st_mtime
    assert ended - reported <= END_AFTER_REPORT_S, f"{ended - reported:.1f} s"
    _assert_job_gone(cluster, done.job_dir)


def test_cancel_stops_the_job_on_every_node(cluster: SlurmNodes, tenter_home: Path) -> None:
    logs = cancel_when_ready(cluster.tenter, cluster.queue, hosts=2, procs=1)
    assert "[algo-1,0]<stdout>: ready 0" in logs
    assert "[algo-2,1]<stdout>: ready 1" in logs
    (job_dir,) = job_dirs(tenter_home / "jobs")
    _assert_job_gone(cluster, job_dir)


def test_an_elastic_job_meets_at_an_etcd_on_a_host_of_its_own(
    cluster: SlurmNodes, tmp_path: Path
) -> None:
    etcd_addr = host_addr(NODES)  # the host after the nodes
    enter = cluster.net.enter(ETCD_HOST)
    with etcd_server(tmp_path / "etcd", etcd_addr, (2379, 2380), enter) as endpoint:
        spec = write_spec(
            tmp_path,
            "whereami.py",
            backend="slurm",
            instance_count=2,
            processes_per_host=1,
            elastic={"rendezvous": {"backend": "etcd", "endpoint": endpoint}},
        )
        done = cluster.tenter("run", str(spec))
    assert done.returncode == 0, done.stderr
    logs = cluster.tenter("logs", done.job_dir.name).stdout
    assert "[algo-2,1]<stdout>: rank 1 of 2 on node-2 as algo-2" in logs
    summary = json.loads((done.job_dir / "summary.json").read_text())
    assert summary["rdzv_endpoint"] == f"{etcd_addr}:2379"
    _assert_job_gone(cluster, done.job_dir)


def _scale_figures(stdout: str) -> dict[str, float]:
    """The ``scale hosts=... ranks=...`` line's figures."""
    (line,) = [line for line in stdout.splitlines() if line.startswith("scale ")]
    return {k: float(v) for k, v in (f.split("=") for f in line.split()[1:])}


def test_the_rehearsal_runs_on_the_slurm_nodes(cluster: SlurmNodes) -> None:
    """``tenter rehearse --backend slurm`` from the login node: sbatch, one real agent per
    node, light ranks; a rank's kill restarts every rank; a rank stopped (through its agent)
    is named by the job's hang watch, which ends the job as a hang. The phases Slurm has not
    are skipped (nan), not faked."""
    hosts, procs = 2, 2
    done = cluster.tenter(
        "rehearse", str(DIGITS / "job.yaml"), "--backend", "slurm", "--hosts", str(hosts),
        "--procs-per-host", str(procs), "--hang-timeout", "3", "--bound", "60", "--steady-s", "1",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    figures = _scale_figures(done.stdout)
    assert (figures["hosts"], figures["ranks"]) == (hosts, hosts * procs)
    for measured in ("first_step_s", "kill_s", "launcher_core", "status_s", "hang_named_s"):
        assert figures[measured] > 0, done.stdout
    assert figures["hang_named_s"] <= 3 + 5, done.stdout  # the hang timeout + 5 s, as local
    for skipped in ("host_lost_s", "store_requests_per_host"):
        assert math.isnan(figures[skipped]), done.stdout
    assert "submitted as Slurm job" in done.stderr
    hang = (done.job_dir / "hang-report.txt").read_text()
    stopped = r"suspect: rank 1 on algo-1 \(pid \d+, stopped\): its process is stopped"
    assert re.search(stopped, hang), hang
    summary = done.summary
    assert summary["exit_code"] == ExitCode.HANG and summary["state"] == "hang"
    assert (summary["hosts"], summary["procs_per_host"]) == (hosts, procs)
    # The kill: the killed rank's agent restarted its group, and every other host with it.
    events = [json.loads(line) for line in (done.job_dir / "events.jsonl").open()]
    restarts = sorted(e["host"] for e in events if e["event"] == "restart")
    assert restarts == [f"algo-{i + 1}" for i in range(hosts)], events
    _assert_job_gone(cluster, done.job_dir)
