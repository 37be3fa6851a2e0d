"""The ledger of real jobs: a worker killed and restarted from its checkpoint."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

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
    # Steps 5 and 6; not step 7, which rank 0 began but never finished (its all-reduce
    # failed with rank 1's death).
    assert ledger["lost_steps"] == 2
    assert ledger == json.loads((done.job_dir / "goodput.json").read_text())
    assert f"goodput {100 * ledger['goodput']:.1f} %" in done.stderr
    status = tenter("status", str(done.job_dir))
    assert f"goodput {100 * ledger['goodput']:.1f} %" in status.stdout
    assert_nothing_left(done.job_dir)


def ddp_job(tmp_path: Path, **environment: str) -> Path:
    """tests/goodput/scripts/ddp_steps.py on 2 hosts x 2 processes (4 ranks)."""
    script = REPO / "tests" / "goodput" / "scripts" / "ddp_steps.py"
    spec = tmp_path / "job.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "entry_point": str(script),
                "instance_count": 2,
                "processes_per_host": 2,
                "environment": environment,
            }
        )
    )
    return spec


def test_straggler_named_within_20_steps_if_rank_sleeps_30_percent_longer(
    tmp_path: Path,
) -> None:
    spec = ddp_job(tmp_path, SLOW_RANK="2", SLOW_EXTRA="0.3", STEPS="30")
    done = tenter("run", str(spec))
    assert done.returncode == 0, done.stderr
    (named,) = done.summary["stragglers"]  # type: ignore[misc]
    assert (named["rank"], named["host"]) == (2, "algo-2")
    assert named["step"] <= 20
    assert f"tenter: straggler: {named['text']}" in done.stderr
    events = [json.loads(line) for line in (done.job_dir / "events.jsonl").open()]
    assert [e["rank"] for e in events if e["event"] == "straggler"] == [2]
    assert_nothing_left(done.job_dir)


def test_no_straggler_named_if_job_balanced(tmp_path: Path) -> None:
    done = tenter("run", str(ddp_job(tmp_path, STEPS="30")))
    assert done.returncode == 0, done.stderr
    assert done.summary["stragglers"] == []
    assert "tenter: straggler:" not in done.stderr
    assert done.summary["goodput"]["productive_steps"] == 30  # type: ignore[index]
