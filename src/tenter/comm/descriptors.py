"""What the ranks of a host tell each other about each collective, and the check that
they agree.

In its first round every collective posts a *descriptor* in the segment: its code, its
sequence number in the group, dtype, element count, reduction, root (and, for
all_to_all, the split sizes). After the round's barrier each rank compares the peers'
descriptors with its own, so that ranks calling different collectives, sizes, dtypes, ops
or roots fail with :class:`CollectiveMismatchError` naming both calls instead of
exchanging garbage.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence

import torch

from tenter.comm.errors import CollectiveMismatchError
from tenter.comm.shm import DESC_FIXED, Channel


class Op(enum.IntEnum):
    """Collective codes written into the descriptors."""

    BARRIER = 1
    ALL_REDUCE = 2
    ALL_GATHER = 3
    REDUCE_SCATTER = 4
    BROADCAST = 5
    REDUCE = 6
    ALL_TO_ALL = 7
    GATHER = 8
    SCATTER = 9


class Reduction(enum.IntEnum):
    """Reductions the kernels implement (AVG is SUM followed by a division)."""

    SUM = 0
    PRODUCT = 1
    MIN = 2
    MAX = 3
    BAND = 4
    BOR = 5
    BXOR = 6


DTYPES: tuple[torch.dtype, ...] = (
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
    torch.complex128,
)
_DTYPE_CODE = {dtype: i for i, dtype in enumerate(DTYPES)}


class Descriptors:
    """Posting and checking descriptors on one channel. ``describe_rank`` names a local
    rank in error messages (its group and global rank)."""

    def __init__(self, channel: Channel, describe_rank: Callable[[int], str]) -> None:
        self.ch = channel
        self.size = channel.size
        self.me = channel.me
        self._describe_rank = describe_rank

    def begin(
        self,
        op: Op,
        seq: int,
        dtype: torch.dtype | None,
        numel: int,
        red: int = -1,
        root: int = -1,
        extra: Sequence[int] = (),
    ) -> tuple[int, tuple[int, ...]]:
        parity = self.ch.next_round()
        code = -1 if dtype is None else _DTYPE_CODE[dtype]
        mine = (int(op), seq, code, numel, red, root, len(extra), 0)
        self.ch.post(parity, mine + tuple(extra) if extra else mine)
        self.ch.current = (op, seq)
        return parity, mine

    def check(self, parity: int, mine: tuple[int, ...], same_numel: bool) -> list[int]:
        """Compare every rank's descriptor with this rank's; return each rank's numel."""
        numels: list[int] = []
        for j in range(self.size):
            theirs = mine if j == self.me else self.ch.peer_desc(parity, j, DESC_FIXED)
            same = theirs[:6] == mine[:6] or (
                not same_numel and theirs[:3] == mine[:3] and theirs[4:6] == mine[4:6]
            )
            if not same:
                raise CollectiveMismatchError(
                    "tenter.comm: ranks called different collectives at the same point: "
                    f"rank {self._describe_rank(self.me)} called {describe(mine)} but rank "
                    f"{self._describe_rank(j)} called {describe(theirs)}. Every rank of a "
                    "process group must call the same collectives in the same order with "
                    "matching sizes, dtypes, ops and roots."
                )
            numels.append(theirs[3])
        return numels

    def extra(self, parity: int, index: int) -> tuple[int, ...]:
        return self.ch.peer_desc(parity, index, DESC_FIXED + self.size)[DESC_FIXED:]

    def mismatch(self, what: str) -> CollectiveMismatchError:
        return CollectiveMismatchError(f"tenter.comm: {self.ch.op_label}: {what}")

    def check_sizes(self, what: str, have: list[int], expected: list[int]) -> None:
        if have != expected:
            raise self.mismatch(
                f"this rank's {what} sizes {have} do not match what the ranks "
                f"contribute {expected} (elements, in local-rank order)."
            )


def describe(desc: Sequence[int]) -> str:
    op, seq, dtype, numel, red, root = desc[:6]
    try:
        name = Op(op).name.lower()
    except ValueError:
        name = f"<unknown op {op}>"
    parts = [f"dtype={DTYPES[dtype]}" if 0 <= dtype < len(DTYPES) else "", f"numel={numel}"]
    if red >= 0:
        parts.append(f"op={Reduction(red).name}")
    if root >= 0:
        parts.append(f"root={root}")
    args = ", ".join(p for p in parts if p)
    return f"{name}({args}) as collective #{seq}"
