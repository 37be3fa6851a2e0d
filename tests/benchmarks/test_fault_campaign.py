"""benchmarks/fault_campaign.py's functions on real jobs: five faults of a 2 x 2 DDP job (one
epoch), each ending as the uninterrupted run, or saying why not, every sample seen once. The
faults that one launch recovers from (a preemption's second launch costs as much as a fault):
the campaign runs the others, and a worker's exception, whose restart is a SIGKILLed worker's
(tests/launch/test_elastic.py and test_faults.py fail workers both ways)."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest

from tests.benchmarks.scripts import load

pytestmark = pytest.mark.slow

CI_FAULTS = (
    "worker_kill",
    "host_lost_shrink",
    "frozen_rank",
    "checkpoint_write_kill",
    "host_joins_grow",
)
RESIZED = {
    "host_lost_shrink": "world_shrank_from_4_to_2_ranks",
    "host_joins_grow": "world_grew_from_2_to_4_ranks",  # a join's restart: its own attempt
}
"""The rows whose world changed: each sample once, the model not the uninterrupted run's."""
LOST_STEPS = {"checkpoint_write_kill": 7}
"""Fault at step 11, checkpoint at 8: steps 9-11 again; a kill inside the checkpoint of step
16 (its rank 0 died before its step 16 counted): 9-15."""


@pytest.fixture(scope="module")
def campaign() -> ModuleType:
    return load("fault_campaign")


@pytest.fixture(scope="module")
def rows(campaign: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("campaign")
    first, reference = campaign.uninterrupted(root / "none", 1, "ddp")
    assert first.exit == 0 and reference
    return {
        name: campaign.campaign_row(name, root / name, 1, "ddp", reference) for name in CI_FAULTS
    }


@pytest.mark.parametrize("name", CI_FAULTS)
def test_fault_ends_as_documented_every_sample_once(rows: dict[str, Any], name: str) -> None:
    row = rows[name]
    assert row.exit == 0, row.line()
    assert (row.duplicates, row.gaps) == (0, 0), row.line()
    assert row.lost_steps == LOST_STEPS.get(name, 3), row.line()
    resized = RESIZED.get(name)
    if resized:
        assert not row.identical
        assert row.line().endswith(" reason=" + row.reason)
        assert row.reason.startswith(f"{resized}:max_abs_diff=")
    else:
        assert row.identical, row.line()
        assert row.line() == (
            f"campaign fault={name} job=ddp exit=0 recover_s={row.recover_s:.2f} "
            f"lost_steps={row.lost_steps} identical=yes duplicates=0 gaps=0"
        )
