"""The plan is what runs: every rank of a job, on every backend that runs on this machine,
receives exactly its entry of the job directory's plan.json (what ``tenter plan --json``
prints), variable for variable, once the values learned at launch are filled in by the plan's
own :func:`~tenter.contract.placeholders.resolve`: the workers' store port (as its server
recorded it), and on Slurm the allocation's node addresses and their interface. And no
variable of the worker contract reaches a rank that the plan does not name."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from tenter.contract.placeholders import MASTER_PORT, SLURM_NIC, resolve, slurm_node
from tenter.contract.plan import Plan
from tenter.jobdir.events import workers_store_ports
from tenter.jobdir.layout import EVENTS_FILE, PLAN_FILE, agent_log, logs_dir
from tests.conftest import SCRIPTS, assert_nothing_left, tenter
from tests.launch.backends import BACKENDS, Backend, ready

pytestmark = pytest.mark.slow

CONTRACT = ("RANK", "LOCAL_", "WORLD_", "GROUP_", "ROLE_", "MASTER_", "TORCHELASTIC_", "SM_")
"""The variables of the worker contract (torchrun's and SageMaker's), by their prefixes, and
tenter's own (``TENTER_``): every one a rank gets must be in its plan."""


def _interface_of(addr: str) -> str:
    """The interface that carries ``addr`` on this machine (the one-node Slurm cluster)."""
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.address == addr for a in addrs):
            return name
    raise AssertionError(f"no interface of this machine has {addr}")


def learned_at_launch(plan: Plan, backend: Backend) -> dict[str, object]:
    """Placeholder -> the value the launch learned, from the job directory's records."""
    values: dict[str, object] = {MASTER_PORT: workers_store_ports(plan.job_dir)[0]}
    if backend.slurm:
        # Each node wrote the plan it ran with its allocation filled in (its host's folder).
        for index, host in enumerate(plan.hosts):
            ran = Plan.from_json((Path(host.dir) / PLAN_FILE).read_text())
            values[slurm_node(index)] = ran.hosts[index].addr
        values[SLURM_NIC] = _interface_of(str(values[slurm_node(0)]))
    return values


@pytest.mark.parametrize("name", BACKENDS)
def test_every_rank_gets_exactly_its_planned_environment(
    name: str, fake_gpus: Callable[[int], Path]
) -> None:
    backend = BACKENDS[name]
    if name == "ray":
        # Ray's nodes declare them (`ray start --num-gpus`): the GPU rule needs no real GPU.
        fake_gpus(backend.world)
    hosts = ["--hosts", str(backend.hosts), "--procs-per-host", str(backend.procs)]
    with ready(backend):
        done = tenter("run", *backend.flags, *hosts, str(SCRIPTS / "contract.py"))
    assert done.returncode == 0, done.stderr
    plan = Plan.from_json((done.job_dir / PLAN_FILE).read_text())
    values = learned_at_launch(plan, backend)
    seen_ranks = []
    for host in plan.hosts:
        for rank in host.ranks:
            record = Path(host.dir) / "output/data" / f"rank-{rank.rank}.json"
            seen: dict[str, str] = json.loads(record.read_text())["env"]
            planned = {k: resolve(v, values) for k, v in plan.process_env(host, rank).items()}
            assert {k: seen.get(k) for k in planned} == planned, f"rank {rank.rank}"
            unplanned = {
                k: v
                for k, v in seen.items()
                if k.startswith((*CONTRACT, "TENTER_"))
                and k not in planned
                and os.environ.get(k) != v
            }
            assert unplanned == {}, f"rank {rank.rank}"
            seen_ranks.append(int(seen["RANK"]))
    assert sorted(seen_ranks) == list(range(backend.world))
    # A fixed membership: the agents started in the plan's round, not one of torch's.
    events = [json.loads(line) for line in (done.job_dir / EVENTS_FILE).read_text().splitlines()]
    rounds = [(e["host"], e["planned"]) for e in events if e["event"] == "rendezvous"]
    agents = [] if name == "mpi" else [(h.name, True) for h in plan.hosts]
    assert sorted(rounds) == agents
    if name == "ray":
        assert_ray_gave_each_host_its_gpus(plan)
    assert_nothing_left(done.job_dir)


def assert_ray_gave_each_host_its_gpus(plan: Plan) -> None:
    """Host i's bundle asked for its GPUs of the plan, and Ray gave its actor those."""
    setup = json.loads(plan.files["ray.json"])
    for host in plan.hosts:
        assert host.gpus == [str(host.index * 2), str(host.index * 2 + 1)]
        assert setup["bundles"][host.index]["GPU"] == 2
        log = (logs_dir(plan.job_dir) / agent_log(host.name)).read_text()
        assert f"ray: this host's actor has GPUs {','.join(host.gpus)}\n" in log, log
