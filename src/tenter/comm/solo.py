"""The collectives of a process group of one rank: its data only moves between its own
tensors, so there is no shared memory and no peer to wait for."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tenter.comm.descriptors import Reduction


class SoloCollectives:
    """:class:`~tenter.comm.routing.CpuCollectives` for a group of one rank."""

    def barrier(self, seq: int) -> None:
        pass

    def all_reduce(self, t: torch.Tensor, red: Reduction, seq: int) -> None:
        pass

    def reduce(self, t: torch.Tensor, root: int, red: Reduction, seq: int) -> None:
        pass

    def broadcast(self, t: torch.Tensor, root: int, seq: int) -> None:
        pass

    def all_gather(
        self,
        inp: torch.Tensor,
        outs: Sequence[torch.Tensor],
        matrix: torch.Tensor | None = None,
        *,
        root: int = -1,
        seq: int,
    ) -> None:
        outs[0].copy_(inp)

    def reduce_scatter(
        self,
        ins: Sequence[torch.Tensor],
        out: torch.Tensor,
        red: Reduction,
        seq: int,
        matrix: torch.Tensor | None = None,
    ) -> None:
        out.copy_(ins[0])

    def scatter(self, ins: Sequence[torch.Tensor], out: torch.Tensor, root: int, seq: int) -> None:
        out.copy_(ins[0])

    def all_to_all(
        self, ins: Sequence[torch.Tensor], outs: Sequence[torch.Tensor], seq: int
    ) -> None:
        outs[0].copy_(ins[0])
