"""Real multi-node Slurm on one machine: slurmctld on the switch (the login node), one slurmd
per host namespace (tests/launch/slurm_cluster.py), and tenter run from the login node puts
each host of the plan on its own node, across a real network."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

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
