"""The straggler rule on made-up arrivals: the slow rank is named, a balanced job never."""

from __future__ import annotations

import random
import statistics

from tenter.goodput.stragglers import (
    StragglerRule,
    StragglerWatch,
    _median_without,
    busy_times,
    find_stragglers,
)

RULE = StragglerRule(window=5, windows=3, ratio=1.15, min_excess_s=0.01)
HOSTS = {0: "algo-1", 1: "algo-1", 2: "algo-2", 3: "algo-2"}


def lockstep(steps: int, compute: dict[int, float], jitter: float = 0.0, seed: int = 0):
    """Arrivals of ranks in lock-step: each starts step k once every rank arrived at k-1
    (plus 1 ms of all-reduce), and computes ``compute[rank]`` seconds (+- jitter)."""
    rng = random.Random(seed)
    out: dict[int, list[tuple[float, int]]] = {r: [] for r in compute}
    start = 0.0
    for step in range(1, steps + 1):
        arrivals = {r: start + c * (1 + rng.uniform(-jitter, jitter)) for r, c in compute.items()}
        for r, t in arrivals.items():
            out[r].append((t, step))
        start = max(arrivals.values()) + 0.001
    return out


def test_busy_times_is_the_wait_free_part_of_each_step():
    busy = busy_times(lockstep(3, {0: 0.1, 1: 0.13}))
    assert sorted(busy) == [2, 3]
    assert abs(busy[3][0] - 0.101) < 1e-9
    assert abs(busy[3][1] - 0.131) < 1e-9


def test_find_stragglers_names_slow_rank_if_persistently_slower():
    steps = lockstep(20, {0: 0.1, 1: 0.1, 2: 0.13, 3: 0.1}, jitter=0.05)
    (straggler,) = find_stragglers(steps, HOSTS, RULE)
    assert (straggler.rank, straggler.host) == (2, "algo-2")
    assert 1.15 < straggler.ratio < 1.45
    assert "rank 2 on algo-2 is" in straggler.text
    assert straggler.step == 16  # busy times from step 2: three windows of 5 end at 16


def test_find_stragglers_waits_for_consecutive_windows():
    steps = lockstep(14, {0: 0.1, 1: 0.1, 2: 0.13, 3: 0.1})
    assert find_stragglers(steps, HOSTS, RULE) == []  # 13 busy times: under 3 windows of 5


def test_find_stragglers_ignores_one_slow_step():
    steps = lockstep(30, {0: 0.1, 1: 0.1, 2: 0.1, 3: 0.1}, jitter=0.02)
    t, s = steps[1][20]
    steps[1][20] = (t + 2.0, s)  # a checkpoint, a page fault: one late arrival
    assert find_stragglers(steps, HOSTS, RULE) == []


def test_find_stragglers_needs_the_absolute_excess_too():
    steps = lockstep(20, {0: 0.001, 1: 0.001, 2: 0.002, 3: 0.001})
    assert find_stragglers(steps, HOSTS, RULE) == []  # 2x, but by 1 ms a step


def test_find_stragglers_never_flags_balanced_jobs():
    for seed in range(200):
        steps = lockstep(60, {r: 0.05 for r in range(4)}, jitter=0.1, seed=seed)
        assert find_stragglers(steps, HOSTS, RULE) == [], seed


def test_find_stragglers_names_rank_that_became_slow():
    steps = lockstep(15, {0: 0.1, 1: 0.1})
    later = lockstep(20, {0: 0.1, 1: 0.15})
    end = steps[0][-1][0]
    for r in (0, 1):
        steps[r] += [(t + end, s + 15) for t, s in later[r]]
    (straggler,) = find_stragglers(steps, HOSTS, RULE)
    assert straggler.rank == 1 and 30 <= straggler.step <= 35


def test_find_stragglers_counts_only_latest_attempt():
    before = lockstep(20, {0: 0.1, 1: 0.13})
    after = lockstep(20, {0: 0.1, 1: 0.1})
    steps = {r: before[r] + [(t + 100, s) for t, s in after[r]] for r in (0, 1)}
    assert find_stragglers(steps, HOSTS, RULE) == []
    assert [s.rank for s in find_stragglers(before, HOSTS, RULE)] == [1]


def test_find_stragglers_ignores_ranks_that_do_not_wait_for_each_other():
    # torchft's replica groups training apart: group 1 started 2 s late and steps at the
    # same pace; its "busy" time is a whole step, group 0's negative (it never waits).
    steps = {
        0: [(0.1 * k, k) for k in range(1, 41)],
        1: [(2.0 + 0.1 * k, k) for k in range(1, 41)],
    }
    assert find_stragglers(steps, {0: "algo-1", 1: "algo-2"}, RULE) == []


def test_median_without_is_the_median_of_the_others():
    rng = random.Random(1)
    for n in range(2, 12):
        values = sorted(rng.choice([0.1, 0.2, 0.3, rng.random()]) for _ in range(n))
        for v in values:
            others = list(values)
            others.remove(v)
            assert _median_without(values, v) == statistics.median(others)


def test_a_watch_fed_as_the_steps_grow_names_what_one_reading_of_them_names():
    slow = lockstep(40, {0: 0.1, 1: 0.1, 2: 0.13, 3: 0.1}, jitter=0.05, seed=3)
    again = lockstep(30, {0: 0.1, 1: 0.16, 2: 0.1, 3: 0.1}, jitter=0.05, seed=4)
    # Rank 2 slow, then every rank restarted (from step 1 again) and rank 1 slow.
    steps = {r: slow[r] + [(100 + t, s) for t, s in again[r]] for r in slow}
    watch, grown = StragglerWatch(RULE), {r: [] for r in steps}
    rng = random.Random(5)
    for _ in range(200):
        for r in steps:  # each rank's lines come in batches of its own size, as read
            grown[r] += steps[r][len(grown[r]) : len(grown[r]) + rng.randint(0, 3)]
        assert watch.update(grown, HOSTS) == find_stragglers(grown, HOSTS, RULE)
    assert grown == steps
    assert [s.rank for s in find_stragglers(steps, HOSTS, RULE)] == [1]
