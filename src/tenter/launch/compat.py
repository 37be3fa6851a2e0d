"""What tenter's launcher needs from torch that differs between the torch versions it supports.

Each entry names the torch versions that need it: dropping a version means deleting lines here.

Nothing else is needed by the host agent (:mod:`tenter.launch.agent`): every supported torch
has the same public elastic API for it (``RendezvousHandler.next_rendezvous`` returns a
``RendezvousInfo`` since 2.4; it returned a tuple before, which no supported torch does).
"""

from __future__ import annotations

import torch

from tenter.errors import TenterError

TCPSTORE_LIBUV_TAKES_LISTEN_FD = torch.__version__ >= "2.8"  # [torch 2.7]
"""torch 2.7: the libuv TCPStore server ignores ``master_listen_fd`` (it never listens on it;
fixed by pytorch/pytorch#150215 in 2.8), so a store serving an already-bound socket uses
the classic backend there (which always could)."""


def refuse_torchft_on_old_torch() -> None:  # [torch 2.7]
    """Raise (exit 2, before anything is written or started) where torchft cannot train with
    this torch (:func:`torchft_gloo_problem`)."""
    problem = torchft_gloo_problem()
    if problem is not None:
        raise TenterError(
            "fault_tolerance",
            problem,
            "run it with torch 2.10 or later (pip install 'torch>=2.10'), or without "
            "fault_tolerance",
        )


def torchft_gloo_problem() -> str | None:  # [torch 2.7]
    """Why torchft 0.2's gloo process group cannot run on this torch, or None. It sets its
    gloo backend's ``options.global_ranks_in_group``, which torch 2.7's gloo options lack
    (every NCCL option has had it): each step then fails to configure the group and none is
    ever committed, with nothing on the console (meta-pytorch/torchft#324). Probed, through
    public names, on a one-rank gloo backend: the 2.8 and 2.9 releases could not be checked
    here; 2.10 and later have it."""
    import datetime

    import torch.distributed as dist

    try:
        backend = dist.ProcessGroupGloo(dist.HashStore(), 0, 1, datetime.timedelta(seconds=1))
    except RuntimeError:  # no gloo device here (an unresolvable hostname): torchft will say
        return None
    if hasattr(backend.options, "global_ranks_in_group"):
        return None
    return (
        f"torchft 0.2's gloo process group needs a torch whose gloo options have "
        f"global_ranks_in_group, and torch {torch.__version__} has none: every step would "
        "fail (meta-pytorch/torchft#324)"
    )
