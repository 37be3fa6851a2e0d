"""benchmarks/recovery.py's counting: where a recovery ends and how many steps it lost."""

from __future__ import annotations

import pytest

from tests.benchmarks.scripts import load

counting = load("recovery_counting")


def _steps(*pairs: tuple[float, int]) -> list[tuple[float, int]]:
    return list(pairs)


def test_a_restart_from_the_checkpoint_loses_the_steps_done_again() -> None:
    # Fault at step 25 (rank 0 finishes 26), restart from the checkpoint of step 20.
    before = [(-25.0 + s, s) for s in range(1, 26)]
    after = [(0.1, 26), *((5.0 + s, s) for s in range(21, 31))]
    first = counting.first_recovered(before[-1], after)
    assert first == (26.0, 21)
    assert counting.lost_steps([*before, *after], first[0]) == 6  # 21..26


def test_a_healed_group_that_jumps_ahead_lost_no_steps_never_a_negative_count() -> None:
    # torchft: rank 0's group waits, then heals and jumps to its peers' step 101 (the
    # -74 the benchmark printed).
    steps = _steps((-1.0, 25), (0.0, 26), (31.0, 101), (31.1, 102))
    first = counting.first_recovered((-1.0, 25), [s for s in steps if s[0] >= 0])
    assert first == (31.0, 101)
    assert counting.lost_steps(steps, first[0]) == 0


def test_survivors_that_never_roll_back_lose_nothing_and_the_longest_wait_ends_it() -> None:
    steps = _steps((-1.0, 25), (0.0, 26), (0.1, 27), (3.1, 28), (3.2, 29))
    first = counting.first_recovered((-1.0, 25), steps[1:])
    assert first == (3.1, 28)
    assert counting.lost_steps(steps, first[0]) == 0


@pytest.mark.parametrize("recovered_at", [-5.0, 0.0, 2.0, 100.0])
def test_lost_steps_is_never_negative_nor_more_than_the_steps_done(recovered_at: float) -> None:
    steps = _steps((-2.0, 10), (-1.0, 11), (0.5, 5), (1.0, 6), (3.0, 200))
    lost = counting.lost_steps(steps, recovered_at)
    assert 0 <= lost <= len(steps)
