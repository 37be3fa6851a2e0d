"""The sample ledger: steps a restart did again count once; duplicates and gaps per epoch."""

from __future__ import annotations

from pathlib import Path

from tenter.data.ledger import SampleLog, attempt_of, read_sample_log, sample_ledger


def log(job_dir: Path, rank: int, attempt: str, steps: list[tuple[int, int, list[int]]]) -> None:
    out = SampleLog(job_dir, rank)
    out.attempt = attempt
    for step, epoch, indices in steps:
        out.write(step, epoch, indices)


def test_steps_done_again_after_a_restart_count_once(tmp_path: Path) -> None:
    # Attempt 0 (2 ranks) did steps 1-3; the restart resumed from step 2's checkpoint with
    # 1 rank and did step 3 again (the same samples), then step 4 (epoch 1).
    log(tmp_path, 0, "r/0", [(1, 0, [0, 2]), (2, 0, [4]), (3, 0, [6])])
    log(tmp_path, 1, "r/0", [(1, 0, [1, 3]), (2, 0, [5]), (3, 0, [7])])
    log(tmp_path, 0, "r/1", [(3, 0, [6, 7]), (4, 1, [3, 1])])
    ledger = sample_ledger(read_sample_log(tmp_path), dataset_size=8)
    assert ledger[0].seen == 8 and ledger[0].duplicates == {} and ledger[0].gaps == []
    assert ledger[1].seen == 2 and ledger[1].gaps == [0, 2, 4, 5, 6, 7]


def test_a_sample_seen_twice_and_one_skipped_are_named(tmp_path: Path) -> None:
    log(tmp_path, 0, "r/0", [(1, 0, [0, 1]), (2, 0, [2, 1])])
    (epoch,) = sample_ledger(read_sample_log(tmp_path), dataset_size=4).values()
    assert epoch.duplicates == {1: 2} and epoch.gaps == [3]


def test_a_restart_that_lets_a_host_join_is_another_attempt() -> None:
    # A join restarts the workers with the restart count unchanged, in a new rendezvous round.
    before = {"TORCHELASTIC_RUN_ID": "r", "TORCHELASTIC_RESTART_COUNT": "0", "MASTER_PORT": "41"}
    joined = before | {"MASTER_PORT": "42"}
    assert attempt_of(before) == attempt_of(dict(before)) != attempt_of(joined)
    # torchrun's c10d rendezvous keeps the workers' port (its store is shared): the world grew.
    grown_under_torchrun = before | {"WORLD_SIZE": "4"}
    assert attempt_of(before | {"WORLD_SIZE": "2"}) != attempt_of(grown_under_torchrun)
