"""nccl-tests flags with no meaning on torch.distributed: accepted at their default value
(so that nccl-tests' command lines run unchanged), refused otherwise with the reason and
what to use instead.

One table, :data:`FLAGS`, drives the parser, the error messages and docs/perf.md's table.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class NcclOnlyFlag:
    short: str
    long: str
    accepted: tuple[int, ...]
    """Values that change nothing here (nccl-tests' default); any other value is refused."""
    meaning: str
    """What the flag does in nccl-tests."""
    why: str
    """Why torch.distributed has no counterpart."""
    instead: str
    """What to do instead; ``{value}`` is the value given."""

    def refusal(self, value: int) -> str:
        return f"{value}: {self.why}. Instead: {self.instead.format(value=value)}"


_ONE_DEVICE = (
    "a torch.distributed rank is one process driving one device, so there is no "
    "{what} within a rank"
)
_MORE_RANKS = (
    "run {value} ranks per host: --procs-per-host {value} (tenter perf) or "
    "torchrun --nproc-per-node {value}"
)

FLAGS = (
    NcclOnlyFlag(
        "-t",
        "--nthreads",
        (1,),
        "threads per process, each driving -g GPUs",
        _ONE_DEVICE.format(what="second thread"),
        _MORE_RANKS,
    ),
    NcclOnlyFlag(
        "-g",
        "--ngpus",
        (1,),
        "GPUs driven by each thread, in one NCCL group",
        _ONE_DEVICE.format(what="second GPU"),
        _MORE_RANKS,
    ),
    NcclOnlyFlag(
        "-y",
        "--stream_null",
        (0,),
        "1: run the collectives on CUDA's default stream",
        "torch.distributed's NCCL backend runs collectives on its own internal streams and "
        "offers no way to put them on the default stream",
        "leave -y at 0",
    ),
    NcclOnlyFlag(
        "-G",
        "--cudagraph",
        (0,),
        "capture the timed iterations in a CUDA graph and launch it N times",
        "tenter perf times eager torch.distributed calls; it does not capture them in CUDA graphs",
        "leave -G at 0, or capture your own step with torch.cuda.graph to measure graphs",
    ),
    NcclOnlyFlag(
        "-R",
        "--local_register",
        (0,),
        "1: register the buffers with NCCL (ncclCommRegister); 2: symmetric registration",
        "torch.distributed does not register tensors one by one; its caching allocator can "
        "register all of its memory with NCCL instead",
        "leave -R at 0 and set TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1 in the "
        "ranks' environment",
    ),
    NcclOnlyFlag(
        "-x",
        "--cta_policy",
        (),
        "set NCCL's CTA policy in the communicator config (0 default, 1 efficiency, 2 zero)",
        "torch.distributed does not pass a CTA policy to NCCL's communicator config",
        "leave -x out",
    ),
    NcclOnlyFlag(
        "-D",
        "--device_implementation",
        (0,),
        "N > 0: time nccl-tests' own kernels on NCCL's device API instead of NCCL's",
        "those kernels are part of nccl-tests, not of NCCL or torch.distributed",
        "leave -D at 0; use nccl-tests itself to time NCCL's device API",
    ),
    NcclOnlyFlag(
        "-V",
        "--device_cta_count",
        (16,),
        "CTAs for the -D kernels (default 16)",
        "it only sizes the -D kernels, which tenter perf does not have",
        "leave -V out",
    ),
)
"""Every nccl-tests flag (its ``setupArgs``) that tenter perf cannot give a meaning to."""


def _only(flag: NcclOnlyFlag) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
        if value not in flag.accepted:
            raise argparse.ArgumentTypeError(flag.refusal(value))
        return value

    return convert


def add_flags(group: argparse._ArgumentGroup) -> None:
    for flag in FLAGS:
        accepted = " or ".join(map(str, flag.accepted)) or "none (leave it out)"
        group.add_argument(
            flag.short,
            flag.long,
            type=_only(flag),
            metavar="N",
            help=f"nccl-tests: {flag.meaning}; accepted here: {accepted}",
        )
