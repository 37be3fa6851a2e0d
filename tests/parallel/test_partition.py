"""The partitioner and the rank layout: pure functions, checked against brute force."""

from __future__ import annotations

import itertools
import re

import pytest

from tenter.parallel.partition import (
    Partition,
    balance,
    blend,
    check_sizes,
    stages_of_rank,
)


def brute_force(costs: list[float], k: int, memory: list[float], cap: float) -> float:
    """The lightest heaviest stage over every contiguous split, by enumeration."""
    n = len(costs)
    best = float("inf")
    for cuts in itertools.combinations(range(1, n), k - 1):
        bounds = [0, *cuts, n]
        spans = list(itertools.pairwise(bounds))
        if any(sum(memory[a:b]) > cap for a, b in spans):
            continue
        best = min(best, max(sum(costs[a:b]) for a, b in spans))
    return best


def heaviest(costs: list[float], sizes: list[int]) -> float:
    bounds = [0, *itertools.accumulate(sizes)]
    return max(sum(costs[a:b]) for a, b in itertools.pairwise(bounds))


@pytest.mark.parametrize(
    ("costs", "k", "expected"),
    [
        ([1, 1, 1, 1], 2, [2, 2]),
        ([4, 1, 1, 1, 1], 2, [1, 4]),  # one heavy block alone
        ([1, 2, 3, 4, 5, 6, 7, 8, 9], 3, [5, 2, 2]),  # 15 | 13 | 17: heaviest 17 is optimal
        ([5, 5, 5], 3, [1, 1, 1]),
        ([1, 1, 1, 10], 2, [3, 1]),  # a heavy head gets a stage of its own
    ],
)
def test_balance_returns_the_optimal_split_if_known_case(
    costs: list[float], k: int, expected: list[int]
) -> None:
    sizes = balance(costs, k)
    assert heaviest(costs, sizes) == heaviest(costs, expected)
    assert heaviest(costs, sizes) == brute_force(costs, k, [0.0] * len(costs), float("inf"))


def test_balance_matches_brute_force_if_random_costs_and_caps() -> None:
    import random

    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 9)
        k = rng.randint(1, n)
        costs = [rng.choice([0.0, 1.0, 2.5, 7.0, rng.random()]) for _ in range(n)]
        memory = [rng.randint(1, 5) for _ in range(n)]
        cap = float(rng.randint(max(memory), sum(memory)))
        optimum = brute_force(costs, k, [float(m) for m in memory], cap)
        if optimum == float("inf"):
            with pytest.raises(ValueError, match="memory_cap"):
                balance(costs, k, memory=memory, memory_cap=cap)
            continue
        sizes = balance(costs, k, memory=memory, memory_cap=cap)
        assert len(sizes) == k and sum(sizes) == n and min(sizes) >= 1
        assert heaviest(costs, sizes) == pytest.approx(optimum)
        bounds = [0, *itertools.accumulate(sizes)]
        assert all(sum(memory[a:b]) <= cap for a, b in itertools.pairwise(bounds))


def test_balance_respects_the_memory_cap_if_the_fastest_split_exceeds_it() -> None:
    costs = [1.0, 1.0, 1.0, 1.0]
    memory = [1.0, 1.0, 1.0, 10.0]
    assert balance(costs, 2) == [2, 2]
    # [2, 2] would put 11 bytes on the last stage: the cap forces the big block alone.
    assert balance(costs, 2, memory=memory, memory_cap=10.0) == [3, 1]


def test_balance_names_the_numbers_if_infeasible() -> None:
    with pytest.raises(ValueError, match=re.escape("3 blocks cannot fill 4 pipeline stages")):
        balance([1.0, 1.0, 1.0], 4)
    with pytest.raises(
        ValueError,
        match=re.escape("memory_cap=5 (the largest block needs 6, the total is 8)"),
    ):
        balance([1.0, 1.0], 2, memory=[2.0, 6.0], memory_cap=5.0)


def test_balance_gives_the_same_split_if_costs_tie() -> None:
    assert balance([1.0] * 6, 4) == balance([1.0] * 6, 4)
    assert balance([1.0] * 6, 4) == [1, 1, 2, 2]


@pytest.mark.parametrize(
    ("sizes", "message"),
    [
        ([2, 2], "partition=[2, 2] has 2 stages but the pipeline has 3"),
        ([2, 0, 4], "partition=[2, 0, 4]: every stage needs at least one block"),
        ([2, 2, 3], "partition=[2, 2, 3] covers 7 blocks but the model has 6"),
    ],
)
def test_check_sizes_names_the_mismatch_if_explicit_sizes_are_wrong(
    sizes: list[int], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        check_sizes(sizes, 6, 3)


def test_check_sizes_returns_the_sizes_if_they_fit() -> None:
    assert check_sizes((1, 2, 3), 6, 3) == [1, 2, 3]


def test_blend_weighs_time_and_parameter_shares() -> None:
    assert blend([1.0, 3.0], [30.0, 10.0], 0.0) == [0.25, 0.75]
    assert blend([1.0, 3.0], [30.0, 10.0], 1.0) == [0.75, 0.25]
    assert blend([1.0, 3.0], [30.0, 10.0], 0.5) == [0.5, 0.5]
    with pytest.raises(ValueError, match=re.escape("memory_weight (1.5) must be between")):
        blend([1.0], [1.0], 1.5)


def test_stages_of_rank_loops_over_virtual_stages() -> None:
    assert stages_of_rank(0, 2, 1) == [0]
    assert stages_of_rank(1, 2, 2) == [1, 3]
    assert stages_of_rank(2, 4, 3) == [2, 6, 10]
    with pytest.raises(ValueError, match="pp_rank 2 is outside the pipeline of 2 ranks"):
        stages_of_rank(2, 2, 1)


def test_describe_lists_blocks_parameters_and_time_per_stage() -> None:
    p = Partition(
        names=["embed", "0", "1", "2", "head"],
        sizes=[2, 3],
        params=[100, 10, 10, 10, 200],
        times=[0.001, 0.002, 0.002, 0.002, 0.003],
        pp=2,
    )
    assert p.describe() == (
        "stage  pp rank  blocks          parameters  est. fwd+bwd\n"
        "0      0        embed .. 0 (2)  110         3.00 ms\n"
        "1      1        1 .. head (3)   220         7.00 ms\n"
        "heaviest stage / mean stage (est.): 1.40"
    )
