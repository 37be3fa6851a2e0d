"""benchmarks/fault_campaign.py's functions on real jobs: five faults of a 2 x 2 DDP job (one
epoch), each ending as the uninterrupted run, or saying why not, every sample seen once."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.benchmarks.scripts import load

pytestmark = pytest.mark.slow

CI_FAULTS = ("worker_kill", "worker_exception", "host_lost_shrink", "preempt_sigterm")
RESUMED = ("launcher_kill",)


@pytest.fixture(scope="module")
def campaign() -> ModuleType:
    return load("fault_campaign")


@pytest.fixture(scope="module")
def rows(campaign: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("campaign")
    first, reference = campaign.uninterrupted(root / "none", 1)
    assert first.exit == 0 and reference
    return {
        name: campaign.campaign_row(name, root / name, 1, reference)
        for name in (*CI_FAULTS, *RESUMED)
    }


@pytest.mark.parametrize("name", (*CI_FAULTS, *RESUMED))
def test_fault_ends_as_documented_every_sample_once(rows: dict[str, Any], name: str) -> None:
    row = rows[name]
    assert row.exit == 0, row.line()
    assert (row.duplicates, row.gaps) == (0, 0), row.line()
    # Fault at step 11, checkpoint at 8: steps 9-11 again, but a preemption's final one.
    assert row.lost_steps == (0 if name == "preempt_sigterm" else 3), row.line()
    if name == "host_lost_shrink":
        assert not row.identical
        assert row.line().endswith(" reason=" + row.reason)
        assert row.reason.startswith("world_shrank_from_4_to_2_ranks:max_abs_diff=")
    else:
        assert row.identical, row.line()
        assert row.line() == (
            f"campaign fault={name} job=ddp exit=0 recover_s={row.recover_s:.2f} "
            f"lost_steps={row.lost_steps} identical=yes duplicates=0 gaps=0"
        )


def test_sample_ledger_counts_duplicates_and_gaps_of_each_steps_last_run(
    campaign: ModuleType, tmp_path: Path
) -> None:
    # 2 steps an epoch of 4 samples: step 2 ran twice (the restart's run counts), and drew
    # sample 1 again the second time, leaving sample 3 out.
    (tmp_path / "samples-0").write_text("a/000 1 0,1\na/000 2 2,3\na/001 2 1\n")
    (tmp_path / "samples-1").write_text("a/001 2 2\n")
    assert campaign.sample_ledger(tmp_path, 2, 4) == (1, 1)
