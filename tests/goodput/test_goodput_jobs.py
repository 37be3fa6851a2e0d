"""The ledger of real jobs: a worker killed and restarted from its checkpoint."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tenter.goodput.ledger import PARTS
from tests.conftest import REPO, assert_nothing_left, tenter
from tests.launch.specs import write_spec

pytestmark = pytest.mark.slow

TRAIN = str(REPO / "examples" / "elastic" / "train.py")


def test_ledger_counts_restart_and_recomputed_steps_if_worker_killed(tmp_path: Path) -> None:
    # examples/elastic/train.py (no tenter.report: tenter counts its DDP steps), 16 steps,
    # checkpoints every 4; rank 1 is SIGKILLed right after step 6: steps 5 and 6 run twice.
    spec = write_spec(
        tmp_path,
        "kill_after_checkpoint.py",
        args=[TRAIN, "--epochs", "1"],
        instance_count=2,
        processes_per_host=1,
        checkpoint={"every": 4},
        environment={"KILL_RANK": "1", "KILL_AT_STEPS": "6"},
        elastic={"max_restarts": 1},
    )
    done = tenter("run", str(spec))
    assert done.returncode == 0, done.stderr
    ledger = done.summary["goodput"]
    assert isinstance(ledger, dict)
    parts = ledger["parts"]
    assert list(parts) == list(PARTS)
    assert math.isclose(sum(parts.values()), ledger["wall_s"], rel_tol=1e-4)
    assert abs(ledger["wall_s"] - float(str(done.summary["duration_s"]))) < 2.0
    assert parts["fault"] > 0 and parts["checkpoint"] > 0 and parts["productive"] > 0
    assert ledger["productive_steps"] == 16
    # Steps 5 and 6, and on rank 0 the step 7 it computed while rank 1 died (its gradients
    # ready, its all-reduce never done) when its record was written before its stop.
    assert ledger["lost_steps"] in (2, 3)
    assert ledger == json.loads((done.job_dir / "goodput.json").read_text())
    assert f"goodput {100 * ledger['goodput']:.1f} %" in done.stderr
    status = tenter("status", str(done.job_dir))
    assert f"goodput {100 * ledger['goodput']:.1f} %" in status.stdout
    assert_nothing_left(done.job_dir)
