"""Every private torch name ``tenter.perf`` uses (one: NCCL's pre-multiplied sum has no
public constructor). A tag ``[torch A-B]`` or ``[torch A+]`` would say which versions a
line serves; none here: every supported torch (2.7 to 2.15) has it."""

from __future__ import annotations

import torch.distributed as dist


def nccl_premul_sum(factor: float) -> dist.ReduceOp:
    """``ReduceOp.PREMUL_SUM`` by ``factor``: NCCL multiplies each input by it, then sums."""
    return dist._make_nccl_premul_sum(factor)
