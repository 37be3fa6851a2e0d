"""``plan.json`` leaves out what follows from a formula (each rank's paths and torch
variables) and the plan read back is the whole plan, every rank spelled out as planned: the
object a backend executes is the one ``tenter plan`` printed."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tenter.contract.placeholders import MASTER_PORT, resolve, slurm_node
from tenter.contract.plan import Plan
from tenter.launch.api import get_backend
from tenter.spec import load

HERE = Path(__file__).parents[1] / "launch"

SHAPES: dict[str, dict[str, Any]] = {
    "local 2 x 2": {"hosts": 2, "processes_per_host": 2},
    "one rank": {"hosts": 1, "processes_per_host": 1},
    "slurm 3 x 4": {"backend": "slurm", "hosts": 3, "processes_per_host": 4},
    "mpi 3 x 2": {"backend": "mpi", "hosts": 3, "processes_per_host": 2},
    "replica groups": {
        "hosts": 4,
        "processes_per_host": 2,
        "elastic": {"max_restarts": 2},
        "fault_tolerance": {"replica_groups": 2, "min_replicas": 1},
    },
    "slurm replica groups": {
        "backend": "slurm",
        "hosts": 4,
        "processes_per_host": 2,
        "fault_tolerance": {"replica_groups": 2},
    },
    "elastic with spares": {
        "hosts": 2,
        "processes_per_host": 2,
        "elastic": {"min_hosts": 1, "max_hosts": 4, "max_restarts": 1},
    },
}


def plan_of(fields: dict[str, Any]) -> Plan:
    spec, _ = load({"entry_point": "scripts/contract.py", "source_dir": str(HERE), **fields}, HERE)
    plan = get_backend(spec.backend).dryrun(spec, "json-1")
    assert isinstance(plan, Plan)
    return plan


@pytest.mark.parametrize("shape", SHAPES)
def test_the_plan_read_back_is_the_plan_with_no_rank_written_out(shape: str) -> None:
    plan = plan_of(SHAPES[shape])
    text = plan.to_json()
    assert Plan.from_json(text) == plan
    assert all("ranks" not in host for host in json.loads(text)["hosts"])
    assert "rank-0.stdout" not in text


def test_a_host_whose_ranks_differ_from_the_formula_keeps_them_whole() -> None:
    plan = plan_of(SHAPES["slurm 3 x 4"])
    second = plan.hosts[1]
    odd = dataclasses.replace(second.ranks[2], env={**second.ranks[2].env, "EXTRA": "1"})
    changed = dataclasses.replace(second, ranks=[*second.ranks[:2], odd, *second.ranks[3:]])
    hosts = [plan.hosts[0], changed, plan.hosts[2]]
    edited = dataclasses.replace(plan, hosts=hosts)
    text = edited.to_json()
    assert Plan.from_json(text) == edited
    assert ["ranks" in host for host in json.loads(text)["hosts"]] == [False, True, False]


def test_values_learned_at_launch_reach_the_ranks_the_json_left_out() -> None:
    """A Slurm node fills in its allocation (``Plan.resolved``): the ranks spelled out again
    from the resolved plan are the planned ranks with the same values filled in."""
    plan = plan_of(SHAPES["slurm replica groups"])
    values: dict[str, object] = {MASTER_PORT: 29500}
    values |= {slurm_node(i): f"10.0.0.{i + 1}" for i in range(4)}
    ran = plan.resolved(values)
    filled = {name: str(value) for name, value in values.items()}
    for host, after in zip(plan.hosts, ran.hosts, strict=True):
        for rank, rank_after in zip(host.ranks, after.ranks, strict=True):
            planned = {k: resolve(v, filled) for k, v in plan.process_env(host, rank).items()}
            assert ran.process_env(after, rank_after) == planned
    third = ran.hosts[2]
    assert ran.process_env(third, third.ranks[0])["MASTER_ADDR"] == "10.0.0.3"
