"""Checking and flattening the tensors handed to a collective, and mapping its ``ReduceOp``.

All of it runs in the caller's thread, so that a bad call raises ``ValueError`` where it
was made and nothing is queued.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import torch

from tenter.comm.descriptors import DTYPES, Reduction

Tensors = list[torch.Tensor]
SUPPORTED_DTYPES = frozenset(DTYPES)
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_REDUCTIONS = {r.name: r for r in Reduction}


def reduction(op: Any, dtype: torch.dtype) -> tuple[Reduction, bool]:
    """(kernel reduction, divide-by-world-size afterwards) for a ``ReduceOp``."""
    return _reduction_of(getattr(op, "op", op), dtype)


@functools.cache
def _reduction_of(kind: Any, dtype: torch.dtype) -> tuple[Reduction, bool]:
    # Cached: this runs on every call, and the latency path is a few tens of microseconds.
    name = getattr(kind, "name", str(kind).rsplit(".", 1)[-1])
    if name == "AVG":
        if dtype not in _FLOAT_DTYPES:
            raise ValueError(
                f"ReduceOp.AVG needs a floating dtype, got {dtype}; use SUM and divide."
            )
        return Reduction.SUM, True
    if name not in _REDUCTIONS:
        raise ValueError(
            f"tenter.comm does not support ReduceOp.{name}; use one of "
            f"{', '.join([*_REDUCTIONS, 'AVG'])}."
        )
    red = _REDUCTIONS[name]
    if red in (Reduction.BAND, Reduction.BOR, Reduction.BXOR) and (
        dtype.is_floating_point or dtype.is_complex
    ):
        raise ValueError(f"ReduceOp.{name} needs an integer or bool dtype, got {dtype}.")
    if red in (Reduction.MIN, Reduction.MAX) and dtype.is_complex:
        raise ValueError(f"ReduceOp.{name} is not defined for complex dtype {dtype}.")
    return red, False


def any_cuda(args: Sequence[object]) -> bool:
    """Whether a CUDA tensor is among ``args`` (tensors, lists of them, lists of lists)."""
    for arg in args:
        if isinstance(arg, torch.Tensor):
            if arg.is_cuda:
                return True
        elif isinstance(arg, list) and any_cuda(arg):
            return True
    return False


def expect(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(f"tenter.comm: {what}.")


def same_dtype(ref: torch.Tensor, others: Sequence[torch.Tensor]) -> None:
    for t in others:
        if t.dtype != ref.dtype:
            raise ValueError(
                f"tenter.comm: tensors of one collective must share a dtype; got "
                f"{ref.dtype} and {t.dtype}."
            )


class Flat:
    """A flat contiguous view of a CPU tensor, or a copy written back on :meth:`done`."""

    def __init__(self, t: torch.Tensor, read: bool = True) -> None:
        if t.dtype not in SUPPORTED_DTYPES:
            raise ValueError(f"tenter.comm does not support dtype {t.dtype}.")
        if not t.is_cpu:
            raise ValueError(f"tenter.comm: expected a CPU tensor, got one on {t.device}.")
        self.orig = t
        if t.is_contiguous():
            self.flat = t.view(-1)
            self.copied = False
        else:
            self.flat = (t.contiguous() if read else torch.empty_like(t).contiguous()).view(-1)
            self.copied = True

    def done(self) -> None:
        if self.copied:
            self.orig.copy_(self.flat.view(self.orig.shape))


def flats(tensors: Sequence[torch.Tensor], read: bool = True) -> list[Flat]:
    return [Flat(t, read) for t in tensors]


def split_rows(
    flat: torch.Tensor, t: torch.Tensor, splits: list[int], size: int, what: str
) -> Tensors:
    """Blocks of ``flat`` per rank: ``splits`` rows of ``t``'s dim 0 (equal if empty)."""
    rows = t.shape[0] if t.dim() else 1
    row = t.numel() // rows if rows else 0
    if not splits:
        expect(rows % size == 0, f"all_to_all: {what} rows not divisible")
        splits = [rows // size] * size
    expect(
        len(splits) == size and sum(splits) == rows,
        f"all_to_all: {what} split sizes {splits} do not cover {rows} rows in {size} parts",
    )
    blocks, at = [], 0
    for s in splits:
        blocks.append(flat[at : at + s * row])
        at += s * row
    return blocks
