"""The values learned at launch fill the plan's placeholders in one place."""

from __future__ import annotations

from pathlib import Path

from tenter.contract.placeholders import (
    LIGHTHOUSE_PORT,
    MASTER_PORT,
    RDZV_PORT,
    SLURM_NIC,
    resolve,
    slurm_node,
)
from tenter.contract.planner import make_plan
from tenter.spec import JobSpec


def test_resolve_fills_the_named_placeholders_and_leaves_the_others() -> None:
    text = f"{slurm_node(0)}:{RDZV_PORT} {MASTER_PORT} ${{HOME}} $rdzv_port"
    assert resolve(text, {RDZV_PORT: 29400, slurm_node(0): "10.0.0.7"}) == (
        f"10.0.0.7:29400 {MASTER_PORT} ${{HOME}} $rdzv_port"
    )
    # One pass: a value that looks like a placeholder stays as it is.
    assert resolve(RDZV_PORT, {RDZV_PORT: MASTER_PORT, MASTER_PORT: 1}) == MASTER_PORT


def test_a_resolved_plan_has_the_values_everywhere_and_nothing_else_changes(tmp_path: Path) -> None:
    spec = JobSpec.model_validate(
        {
            "entry_point": "train.py",
            "instance_count": 2,
            "distribution": {"torch_distributed": {"enabled": True}},
            "environment": {"QUOTED": 'say "hi"'},
        }
    )
    plan = make_plan(spec, "tenter-test-0000", tmp_path, "python3")
    assert RDZV_PORT in plan.rdzv_endpoint
    done = plan.resolved({RDZV_PORT: 29400, LIGHTHOUSE_PORT: 1, SLURM_NIC: "eth0"})
    assert done.rdzv_endpoint == plan.rdzv_endpoint.replace(RDZV_PORT, "29400")
    assert RDZV_PORT not in done.to_json()
    assert done.host_env(done.hosts[1])["QUOTED"] == 'say "hi"'
    assert done.resolved({}) == done
    assert plan.resolved({}) == plan
