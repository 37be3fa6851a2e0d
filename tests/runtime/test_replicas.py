"""The replicas checked: a flipped bit caught within the interval, the rank and step named,
before the next checkpoint; the fingerprint arithmetic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from tenter.runtime.replicas import ReplicaCheck, divergent, fingerprint
from tests.conftest import REPO, assert_nothing_left, job_checkpoints, tenter
from tests.runtime.replica_workers import hsdp_flip
from tests.world import run_world

SCRIPT = REPO / "tests" / "data" / "scripts" / "faults_train.py"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int8])
def test_one_flipped_bit_anywhere_changes_the_fingerprint(dtype: torch.dtype) -> None:
    params = [torch.randn(5, 7).to(dtype), torch.randn(3).to(dtype)]
    before = fingerprint(params)
    for param in params:
        for element in range(param.numel()):
            for bit in (0, param.element_size() * 8 - 1):
                bits = param.view(-1)[element : element + 1].view(torch.uint8)
                bits[bit // 8] ^= 1 << (bit % 8)
                assert not torch.equal(fingerprint(params), before)
                bits[bit // 8] ^= 1 << (bit % 8)
    assert torch.equal(fingerprint(params), before)


def test_the_replica_unlike_the_most_is_named_and_ties_side_with_rank_0() -> None:
    assert divergent([[1, 2], [1, 2], [1, 3], [1, 2]]) == [2]
    assert divergent([[1, 2], [1, 3]]) == [1]
    assert divergent([[5], [5], [5]]) == []


def flipped_bit_job(tmp_path: Path, mode: str) -> Path:
    """A 3-rank DDP job in which rank 1 flips a bit after step 5; compared every 3 steps."""
    spec = tmp_path / "job.yaml"
    environment = {
        "FLIP_AT": "5",
        "FLIP_RANK": "1",
        "TENTER_REPLICA_CHECK_EVERY": "3",
        "TENTER_REPLICA_CHECK": mode,
    }
    job = {
        "entry_point": str(SCRIPT),
        "processes_per_host": 3,
        "checkpoint": {"every": 4},
        "environment": environment,
    }
    spec.write_text(yaml.safe_dump(job))
    return spec


TEXT = "replicas diverged at step 6: rank 1 of 3 replicas hold other parameters (first: weight)"


def test_hsdp_compares_each_shard_across_its_replicas_and_fsdp_has_none() -> None:
    # TENTER_REPLICA_CHECK=warn there: the divergent ranks are returned, nothing raised.
    results = run_world(hsdp_flip, 4).values()
    assert [r["agreed"] for r in results] == [[], [], [], []]
    # Rank 3's shard is replicated on rank 1 only: a tie, rank 1's side taken as right.
    assert [r["diverged"] for r in results] == [[], [3], [], [3]]
    assert [r["fsdp"] for r in results] == [None] * 4


@pytest.mark.slow
def test_a_flipped_bit_stops_the_job_before_the_next_checkpoint(tmp_path: Path) -> None:
    done = tenter("run", str(flipped_bit_job(tmp_path, "stop")))
    assert done.returncode != 0
    # Checked after steps 3, 4 (before its checkpoint) and 6: the flip after step 5 is caught
    # at 6, within the interval, and the checkpoint of step 8 is never written.
    assert f"tenter: {TEXT}" in done.stderr
    assert "ReplicasDiverged" in done.stderr
    summary = json.loads((done.job_dir / "summary.json").read_text())
    assert summary["replicas"]["agreed_steps"] == [3, 4]
    (diverged,) = summary["replicas"]["diverged"]
    assert (diverged["step"], diverged["ranks"]) == (6, [1])
    assert diverged["text"].startswith(TEXT)
    checkpoints = sorted(p.name for p in job_checkpoints(done.job_dir).glob("step-*"))
    assert checkpoints == ["step-00000004"]
    assert_nothing_left(done.job_dir)


@pytest.mark.parametrize(
    ("name", "value", "error"),
    [
        ("TENTER_REPLICA_CHECK", "never", r"TENTER_REPLICA_CHECK='never': use one of stop, warn"),
        ("TENTER_REPLICA_CHECK_EVERY", "0", r"_EVERY='0': use a whole number of steps, at least"),
    ],
)
def test_a_bad_setting_is_named_with_its_fix(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, error: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=error):
        ReplicaCheck(torch.nn.Linear(1, 1))
