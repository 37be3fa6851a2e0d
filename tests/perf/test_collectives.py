"""Per-collective definitions against nccl-tests: busbw factors, byte counts, exact data."""

from __future__ import annotations

import random

import pytest
import torch

from tenter.perf import options
from tenter.perf.collectives import COLLECTIVES
from tenter.perf.verifiable import DTYPES, Pattern, premul_factor


def test_every_collective_of_the_cli_has_a_definition() -> None:
    assert tuple(COLLECTIVES) == options.COLLECTIVES


@pytest.mark.parametrize(
    "name,factor_at_4,factor_at_8",
    [
        ("all_reduce", 2 * 3 / 4, 2 * 7 / 8),  # 2(n-1)/n
        ("all_gather", 3 / 4, 7 / 8),  # (n-1)/n
        ("reduce_scatter", 3 / 4, 7 / 8),
        ("alltoall", 3 / 4, 7 / 8),
        ("broadcast", 1, 1),
        ("reduce", 1, 1),
        ("sendrecv", 1, 1),
    ],
)
def test_busbw_factor_is_nccl_tests_performance_md(
    name: str, factor_at_4: float, factor_at_8: float
) -> None:
    assert COLLECTIVES[name].busbw_factor(4) == pytest.approx(factor_at_4)
    assert COLLECTIVES[name].busbw_factor(8) == pytest.approx(factor_at_8)


@pytest.mark.parametrize(
    "name,send,recv,param",
    [
        # 1000 elements, 4 ranks: nccl-tests' getCollByteCount for each collective.
        ("all_reduce", 1000, 1000, 1000),
        ("all_gather", 250, 1000, 250),  # S = the whole gathered buffer
        ("reduce_scatter", 1000, 250, 250),  # S = the whole input
        ("alltoall", 1000, 1000, 250),
        ("broadcast", 1000, 1000, 1000),
        ("reduce", 1000, 1000, 1000),
        ("sendrecv", 1000, 1000, 1000),
    ],
)
def test_geometry_is_nccl_tests_byte_count(name: str, send: int, recv: int, param: int) -> None:
    g = COLLECTIVES[name].geometry(1000, 4)
    assert (g.send, g.recv, g.param) == (send, recv, param)


def test_in_place_offsets_place_the_rank_chunk_as_nccl_tests() -> None:
    assert COLLECTIVES["all_gather"].geometry(1000, 4).send_offset == 250
    assert COLLECTIVES["reduce_scatter"].geometry(1000, 4).recv_offset == 250
    assert COLLECTIVES["all_reduce"].geometry(1000, 4).send_offset == 0


_NO_ARITHMETIC = (torch.uint32, torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2)
"""torch cannot add or multiply these on the CPU: reduce in the wide type and check that
every partial result is exact in the type."""


def _reduce_in_dtype(tensors: list[torch.Tensor], op: str, factors: list[int]) -> torch.Tensor:
    dtype = tensors[0].dtype
    if dtype in _NO_ARITHMETIC:
        wide = torch.float64 if dtype.is_floating_point else torch.int64
        tensors = [t.to(wide) for t in tensors]
    if op == "mulsum":  # each rank scales its own input, in the type, before the sum
        tensors = [t * f for t, f in zip(tensors, factors, strict=True)]
    acc = tensors[0].clone()
    for t in tensors[1:]:
        if op in ("sum", "avg", "mulsum"):
            acc += t
        elif op == "prod":
            acc *= t
        elif op == "min":
            acc = torch.minimum(acc, t)
        else:
            acc = torch.maximum(acc, t)
        if dtype in _NO_ARITHMETIC:
            assert torch.equal(acc.to(dtype).to(acc.dtype), acc)
    return acc


@pytest.mark.parametrize("type_name", sorted(DTYPES))
@pytest.mark.parametrize("op", ["sum", "prod", "min", "max", "mulsum"])
@pytest.mark.parametrize("nranks", [2, 3, 8, 300])
def test_reduction_is_exact_in_the_type_whatever_the_order(
    type_name: str, op: str, nranks: int
) -> None:
    data = Pattern(DTYPES[type_name], op, nranks, torch.device("cpu"))
    inputs = [data.values(rank, 5, 200) for rank in range(nranks)]
    expected = data.reduced(5, 200)
    for seed in range(3):
        order = list(range(nranks))
        random.Random(seed).shuffle(order)
        got = _reduce_in_dtype([inputs[r] for r in order], op, [premul_factor(r) for r in order])
        assert data.count_wrong(got, expected) == 0
    assert inputs[0].to(data.wide).abs().max() <= 100 or op == "prod"


def test_mulsum_doubles_the_odd_ranks_as_nccl_tests() -> None:
    assert [premul_factor(rank) for rank in range(4)] == [1, 2, 1, 2]
    data = Pattern(torch.float32, "mulsum", 2, torch.device("cpu"))
    got = data.values(0, 0, 8).double() + 2 * data.values(1, 0, 8).double()
    assert torch.equal(data.reduced(0, 8), got)
    plain = data.values(0, 0, 8).double() + data.values(1, 0, 8).double()
    assert not torch.equal(data.reduced(0, 8), plain)


def test_inputs_differ_between_ranks_and_elements() -> None:
    data = Pattern(torch.float32, "sum", 4, torch.device("cpu"))
    assert not torch.equal(data.values(0, 0, 64), data.values(1, 0, 64))
    assert data.values(0, 0, 64).unique().numel() > 10


def test_avg_allows_only_rounding() -> None:
    data = Pattern(torch.float32, "avg", 3, torch.device("cpu"))
    expected = data.reduced(0, 100)
    rounded = expected.to(torch.float32)
    assert data.count_wrong(rounded, expected) == 0
    rounded[7] += 1
    assert data.count_wrong(rounded, expected) == 1


def test_a_wrong_element_is_counted() -> None:
    data = Pattern(torch.int32, "sum", 4, torch.device("cpu"))
    expected = data.reduced(0, 100)
    got = expected.to(torch.int32)
    got[3] -= 1
    got[50] = 0
    assert data.count_wrong(got, expected) == 2
