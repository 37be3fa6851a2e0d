"""examples/gpt end to end: real `tenter run` jobs (2 hosts x 2 processes: pp 2 x dp 2 from
SMP v1 parameters, FSDP 2 x tp 2 from SMP v2's) and the same script in one process, on the
shipped Shakespeare corpus."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, assert_nothing_left, tenter

pytestmark = pytest.mark.slow

GPT = REPO / "examples" / "gpt"
STEPS = "40"


def run_alone(out: Path, steps: str, *args: str) -> tuple[str, dict[str, float]]:
    """examples/gpt/train.py in one plain process (pp 1), its result JSON written to ``out``:
    (stdout, result)."""
    out.mkdir(exist_ok=True)
    done = subprocess.run(
        [sys.executable, str(GPT / "train.py"), "--pp", "1", "--steps", steps, *args],
        capture_output=True,
        text=True,
        cwd=out,
        timeout=120,
        env={
            "PATH": "/usr/bin:/bin",
            "OMP_NUM_THREADS": "1",
            "SM_OUTPUT_DATA_DIR": str(out),
            # The tenter under test, where it is not the installed one (a worktree); the
            # test's temporary folders (torch makes its compile cache there).
            **{
                k: v
                for k, v in os.environ.items()
                if k in ("PYTHONPATH", "TMPDIR", "TORCHINDUCTOR_CACHE_DIR")
            },
        },
    )
    assert done.returncode == 0, done.stderr
    result: dict[str, float] = json.loads((out / "gpt-result.json").read_text())
    return done.stdout, result


def test_gpt_loss_goes_down_if_pp2_dp2_on_two_hosts_and_matches_one_process(
    tmp_path: Path,
) -> None:
    done = tenter(
        "run", "--hosts", "2", "--procs-per-host", "2", str(GPT / "train.py"),
        "--", "--pp", "2", "--steps", STEPS,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    # cluster placement: ranks 0,1 form the first pipeline, on algo-1; rank 1 reports.
    result = json.loads((done.job_dir / "hosts/algo-1/output/data/gpt-result.json").read_text())
    assert (result["pp"], result["dp"]) == (2, 2)
    assert result["first_loss"] < result["uniform_loss"] + 0.3
    assert result["last_loss"] < result["first_loss"] - 0.7
    assert_nothing_left(done.job_dir)

    _, alone = run_alone(tmp_path, STEPS)
    assert (alone["pp"], alone["dp"]) == (1, 1)
    # Same data, same initial model: the first steps agree to fp32 rounding.
    assert alone["first_loss"] == pytest.approx(result["first_loss"], rel=1e-5)


def test_gpt_job_yaml_runs_pp2_dp2_from_the_smp_parameters() -> None:
    done = tenter("run", str(GPT / "job.yaml"), "--hp", f"steps={STEPS}")
    assert done.returncode == 0, done.stderr
    result = json.loads((done.job_dir / "hosts/algo-1/output/data/gpt-result.json").read_text())
    assert (result["pp"], result["dp"]) == (2, 2)
    assert result["last_loss"] < result["first_loss"] - 0.7
    assert_nothing_left(done.job_dir)


def test_gpt_job_v2_yaml_runs_fsdp_by_tp_from_the_smp_v2_parameters() -> None:
    done = tenter("run", str(GPT / "job-v2.yaml"), "--hp", f"steps={STEPS}")
    assert done.returncode == 0, done.stderr
    # tp innermost: ranks 0 and 1 split every block, on algo-1; rank 0 reports.
    result = json.loads((done.job_dir / "hosts/algo-1/output/data/gpt-result.json").read_text())
    assert (result["pp"], result["dp"], result["tp"]) == (1, 2, 2)
    assert result["last_loss"] < result["first_loss"] - 0.7
    assert_nothing_left(done.job_dir)


def test_gpt_resumed_from_its_checkpoint_ends_with_the_loss_of_an_uninterrupted_run(
    tmp_path: Path,
) -> None:
    checkpoints = ["--checkpoint_every", "2", "--checkpoint_dir", str(tmp_path / "ckpt")]
    first, _ = run_alone(tmp_path / "first", "2", *checkpoints)
    assert "saved checkpoint at step 2" in first
    again, resumed = run_alone(tmp_path / "resumed", "4", *checkpoints)
    assert "resumed at step 2;" in again
    _, whole = run_alone(tmp_path / "whole", "4")
    assert resumed["final_loss"] == whole["final_loss"]
