"""Verifiable data: inputs whose collective result is exact in the element type, whatever
order the backend reduces in (the idea of nccl-tests' ``verifiable/``).

Every value is a small non-negative integer, and the values are bounded so that every
partial result is exact too:

- sum, avg and mulsum: each rank contributes at most ``limit // nranks`` (after mulsum's
  factor of 1 or 2), so any partial sum stays
  at or under the type's largest exact integer (127 for int8, 256 for bfloat16, 2048 for
  half...). With more ranks than that limit, only ``limit`` ranks contribute a 1 to each
  element and the rest contribute 0.
- prod: factors of 1 and 2 only, at most as many 2s per element as the type holds
  exactly (2**6 for int8, 2**15 for half), so the product is a power of two.
- min, max, and the non-reducing collectives: values up to 100 (or the type's limit).

The expected result is computed independently on each rank, in float64 or int64, where it
is exact, and compared element by element: exactly, except for ``avg``, whose division
rounds (floats: within one unit of relative precision; integers: within 1).
"""

from __future__ import annotations

import torch

DTYPES: dict[str, torch.dtype] = {
    "float": torch.float32,
    "double": torch.float64,
    "half": torch.float16,
    "bfloat16": torch.bfloat16,
    "int32": torch.int32,
    "int64": torch.int64,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "f8e4m3": torch.float8_e4m3fn,
    "f8e5m2": torch.float8_e5m2,
}
"""nccl-tests' type names -> torch dtypes."""

_EXACT_MAX = {
    torch.int8: 127,
    torch.uint8: 255,
    torch.int32: 2**31 - 1,
    torch.int64: 2**63 - 1,
    torch.uint32: 2**32 - 1,
    torch.uint64: 2**63 - 1,  # the wide type, int64, holds no more
    torch.float16: 2**11,
    torch.bfloat16: 2**8,
    torch.float32: 2**24,
    torch.float64: 2**53,
    torch.float8_e4m3fn: 2**4,  # 3 mantissa bits
    torch.float8_e5m2: 2**3,  # 2 mantissa bits
}
"""The largest integer n such that every integer 0..n is exact in the type."""

_MAX_POWER_OF_TWO = {
    torch.int8: 6,
    torch.uint8: 7,
    torch.int32: 30,
    torch.int64: 62,
    torch.uint32: 31,
    torch.uint64: 62,
    torch.float16: 15,
    torch.bfloat16: 127,
    torch.float32: 127,
    torch.float64: 1023,
    torch.float8_e4m3fn: 8,  # the largest finite value is 448
    torch.float8_e5m2: 15,
}

_SMALL = 100
"""Values stay this small (or smaller): nccl-tests' data are small integers too."""


def premul_factor(rank: int) -> int:
    """The factor ``mulsum`` multiplies ``rank``'s input by before summing: 1 on even
    ranks, 2 on odd ones, as nccl-tests' ``ncclVerifiablePremulScalar``."""
    return 1 + rank % 2


class Pattern:
    """The inputs of one (type, reduction, world size) and their exact reductions."""

    def __init__(self, dtype: torch.dtype, op: str | None, nranks: int, device: torch.device):
        self.dtype, self.op, self.nranks, self.device = dtype, op, nranks, device
        self.wide = torch.float64 if dtype.is_floating_point else torch.int64
        limit = _EXACT_MAX[dtype]
        if op in ("sum", "avg", "mulsum"):
            # mulsum doubles the odd ranks' inputs (premul_factor) before summing.
            limit //= 2 if op == "mulsum" else 1
            self.high = max(1, min(_SMALL, limit // nranks))
            self.active = min(nranks, limit)
        else:
            self.high = min(_SMALL, limit)
            self.active = nranks
        # Products are 2**t with t cycling over 0..max_twos across elements.
        self.max_twos = min(nranks, _MAX_POWER_OF_TWO[dtype], 16)

    def values(self, rank: int, start: int, count: int) -> torch.Tensor:
        """Elements ``start .. start+count`` of ``rank``'s input, in the element type."""
        return self._wide_values(rank, start, count).to(self.dtype)

    def _wide_values(self, rank: int, start: int, count: int) -> torch.Tensor:
        idx = torch.arange(start, start + count, dtype=torch.int64, device=self.device)
        # (idx + rank) % nranks is a permutation of the ranks for each element: it picks
        # which ranks contribute, so that the contributors differ from element to element.
        slot = (idx + rank) % self.nranks
        if self.op == "prod":
            values = torch.where(slot < idx % (self.max_twos + 1), 2, 1)
        else:
            values = (idx * 3 + rank * 7) % self.high + 1
            if self.active < self.nranks:
                values = torch.where(slot < self.active, values, 0)
        return values.to(self.wide)

    def reduced(self, start: int, count: int) -> torch.Tensor:
        """The exact reduction over all ranks of elements ``start .. start+count`` (wide type)."""
        acc = self._wide_values(0, start, count) * (premul_factor(0) if self.op == "mulsum" else 1)
        for rank in range(1, self.nranks):
            other = self._wide_values(rank, start, count)
            if self.op == "prod":
                acc *= other
            elif self.op == "min":
                acc = torch.minimum(acc, other)
            elif self.op == "max":
                acc = torch.maximum(acc, other)
            else:
                acc += other * premul_factor(rank) if self.op == "mulsum" else other
        if self.op == "avg":
            return acc.to(torch.float64) / self.nranks
        return acc

    def count_wrong(self, got: torch.Tensor, expected: torch.Tensor) -> int:
        """How many elements of ``got`` differ from ``expected`` (a wide tensor)."""
        got = got.to(expected.dtype)
        if self.op != "avg":
            return int((got != expected).sum())
        if self.dtype.is_floating_point:
            tolerance = torch.finfo(self.dtype).eps * expected.abs()
        else:
            tolerance = torch.ones_like(expected)
        return int(((got - expected).abs() > tolerance).sum())
