"""A real elastic job that loses a host mid-epoch (4 ranks, then 2): over the whole job every
sample of each epoch is trained on exactly once, in the uninterrupted run's global batches;
and its replicas, compared every 2 steps and after the recovery, always agreed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from torch.utils.data import DistributedSampler

from tenter.data.ledger import effective, read_sample_log, sample_ledger
from tests.conftest import REPO, assert_nothing_left, tenter

pytestmark = pytest.mark.slow

SCRIPT = REPO / "tests" / "data" / "scripts" / "faults_train.py"
SIZE, GLOBAL_BATCH = 60, 12


@pytest.fixture(scope="module")
def lost_host_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The job's directory, once for the module."""
    folder = tmp_path_factory.mktemp("resize")
    spec = folder / "job.yaml"
    elastic = {"min_hosts": 1, "max_restarts": 1, "rendezvous": {"last_call_timeout": 1}}
    fields = {
        "instance_count": 2,
        "processes_per_host": 2,
        "elastic": elastic,
        "checkpoint": {"every": 2},
    }
    environment = {
        "LOSE_AT_STEP": "3",
        "GLOBAL_BATCH": str(GLOBAL_BATCH),
        "TENTER_REPLICA_CHECK_EVERY": "2",
    }
    spec.write_text(
        yaml.safe_dump({"entry_point": str(SCRIPT), **fields, "environment": environment})
    )
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TENTER_HOME", str(folder / "tenter-home"))
        (folder / "tmp").mkdir()
        env.setenv("TMPDIR", str(folder / "tmp"))
        done = tenter("run", str(spec))
        assert done.returncode == 0, done.stderr
        assert "going on with 1 host" in done.stderr
        assert "done at step 10, world 2" in done.stdout + done.stderr
        assert_nothing_left(done.job_dir)
        return done.job_dir


def test_every_sample_of_each_epoch_once_across_the_lost_host(lost_host_job: Path) -> None:
    records = read_sample_log(lost_host_job)
    # Step 3 ran on 4 ranks, then again on 2 after the resume from step 2's checkpoint.
    assert len({r.attempt for r in records if r.step == 3}) == 2
    ledger = sample_ledger(records, SIZE)
    assert list(ledger) == [0, 1]
    for epoch in ledger.values():
        assert (epoch.seen, epoch.duplicates, epoch.gaps) == (SIZE, {}, [])


def test_the_global_batches_are_the_uninterrupted_runs(lost_host_job: Path) -> None:
    kept = effective(read_sample_log(lost_host_job))
    steps: dict[int, set[int]] = {}
    for record in kept:
        steps.setdefault(record.step, set()).update(record.indices)
    expected = []
    for epoch in range(2):
        whole = DistributedSampler(range(SIZE), num_replicas=1, rank=0, seed=1)
        whole.set_epoch(epoch)
        order = list(whole)
        expected += [set(order[k : k + GLOBAL_BATCH]) for k in range(0, SIZE, GLOBAL_BATCH)]
    assert [steps[s] for s in sorted(steps)] == expected
    assert {r.rank for r in kept if r.step > 3} == {0, 1}  # the world after the loss


def test_the_replicas_agreed_at_every_check_and_after_the_recovery(lost_host_job: Path) -> None:
    summary = json.loads((lost_host_job / "summary.json").read_text())
    # Before each checkpoint (2, 4, ..., 10) and after the resume from step 2: the same step
    # as the save's check just before, which the step counter's check makes no second one.
    assert summary["replicas"] == {"agreed_steps": [2, 2, 4, 6, 8, 10], "diverged": []}
