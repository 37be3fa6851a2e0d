"""The flags of ``tenter perf COLLECTIVE``: nccl-tests' spelling, meaning and defaults.

Parsed and validated here once, for the ``tenter perf`` command (which launches the job)
and for the worker (``python -m tenter.perf``, which runs under any launcher). This module
imports no torch, so that the CLI answers ``--help`` and flag errors at once.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass

COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "reduce_scatter",
    "broadcast",
    "reduce",
    "alltoall",
    "sendrecv",
)
"""Every collective ``tenter perf`` benchmarks, in nccl-tests' names (without ``_perf``)."""

OPS = ("sum", "prod", "min", "max", "avg")
DATATYPES = ("float", "double", "half", "bfloat16", "int32", "int64", "int8", "uint8")
AVERAGES = {0: "rank 0", 1: "mean", 2: "min", 3: "max"}
"""``-a``: how the per-rank times of one size combine into the reported time."""

_SIZE = re.compile(r"^(\d+)\s*([KMG]?)B?$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """``8``, ``64K``, ``128M``, ``1G`` (binary units, as nccl-tests reads them)."""
    match = _SIZE.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a size; write bytes as a whole number with an optional "
            "K, M or G suffix (binary), e.g. 8, 64K, 128M, 1G"
        )
    return int(match.group(1)) * _UNITS[match.group(2).upper()]


def format_size(nbytes: int) -> str:
    """The shortest exact K/M/G spelling of ``nbytes`` (the inverse of :func:`parse_size`)."""
    for unit in ("G", "M", "K"):
        if nbytes and nbytes % _UNITS[unit] == 0:
            return f"{nbytes // _UNITS[unit]}{unit}"
    return str(nbytes)


def _int_at_least(minimum: int) -> Callable[[str], int]:
    def convert(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below the minimum of {minimum}")
        return value

    return convert


@dataclass(frozen=True)
class PerfOptions:
    """One benchmark run, as the flags describe it (validated)."""

    collective: str
    minbytes: int = 32 << 20
    maxbytes: int = 32 << 20
    stepfactor: int = 1
    """Multiply the size by this after each row; 1: add ``stepbytes`` instead."""
    stepbytes: int = 1 << 20
    iters: int = 20
    warmup_iters: int = 1
    check: int = 1
    """Number of checked runs per row half (nccl-tests' ``-c``); 0: no check."""
    ops: tuple[str, ...] = ("sum",)
    datatypes: tuple[str, ...] = ("float",)
    root: int = 0
    average: int = 1
    blocking: bool = False
    backend: str | None = None
    """The torch.distributed backend; None: NCCL for CUDA tensors, gloo for CPU tensors."""
    device: str = "cpu"
    json: str | None = None

    def sizes(self) -> list[int]:
        """The message sizes of the sweep, in bytes, as nccl-tests steps them."""
        sizes, size = [], self.minbytes
        while size <= self.maxbytes:
            sizes.append(size)
            size = size * self.stepfactor if self.stepfactor > 1 else size + self.stepbytes
        return sizes

    def argv(self) -> list[str]:
        """The flags that reproduce these options (what ``tenter perf`` passes its workers)."""
        step = ["-f", str(self.stepfactor)] if self.stepfactor > 1 else ["-i", str(self.stepbytes)]
        argv = [
            self.collective,
            *("-b", str(self.minbytes), "-e", str(self.maxbytes), *step),
            *("-n", str(self.iters), "-w", str(self.warmup_iters), "-c", str(self.check)),
            *("-o", _all_or_list(self.ops, OPS), "-d", _all_or_list(self.datatypes, DATATYPES)),
            *("-r", str(self.root), "-a", str(self.average), "-z", str(int(self.blocking))),
            *("--device", self.device),
        ]
        if self.backend:
            argv += ["--backend", self.backend]
        if self.json:
            argv += ["--json", self.json]
        return argv


def _all_or_list(chosen: tuple[str, ...], every: tuple[str, ...]) -> str:
    return "all" if chosen == every else ",".join(chosen)


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Register the benchmark flags on ``parser`` (nccl-tests' short and long names)."""
    size = parse_size
    g = parser.add_argument_group("sweep (nccl-tests flags)")
    g.add_argument(
        "-b",
        "--minbytes",
        type=size,
        default=32 << 20,
        metavar="SIZE",
        help="smallest message size, e.g. 8, 64K, 1M (default 32M)",
    )
    g.add_argument(
        "-e",
        "--maxbytes",
        type=size,
        default=32 << 20,
        metavar="SIZE",
        help="largest message size (default 32M)",
    )
    g.add_argument(
        "-f",
        "--stepfactor",
        type=_int_at_least(2),
        metavar="N",
        help="multiply the size by N between rows",
    )
    g.add_argument(
        "-i",
        "--stepbytes",
        type=size,
        metavar="SIZE",
        help="add SIZE between rows (default 1M when -f is not given)",
    )
    g.add_argument(
        "-n",
        "--iters",
        type=_int_at_least(1),
        default=20,
        metavar="N",
        help="timed iterations per size (default 20)",
    )
    g.add_argument(
        "-w",
        "--warmup_iters",
        type=_int_at_least(0),
        default=1,
        metavar="N",
        help="untimed iterations per size before any timing (default 1)",
    )
    g.add_argument(
        "-c",
        "--check",
        type=_int_at_least(0),
        default=1,
        metavar="N",
        help="check the result N times per size and count wrong elements (default 1)",
    )
    g.add_argument(
        "-o", "--op", choices=(*OPS, "all"), default="sum", help="reduction (default sum)"
    )
    g.add_argument(
        "-d",
        "--datatype",
        choices=(*DATATYPES, "all"),
        default="float",
        help="element type (default float)",
    )
    g.add_argument(
        "-r",
        "--root",
        type=_int_at_least(0),
        default=0,
        metavar="RANK",
        help="root rank of broadcast and reduce (default 0)",
    )
    g.add_argument(
        "-a",
        "--average",
        type=int,
        choices=sorted(AVERAGES),
        default=1,
        help="combine per-rank times: 0 rank 0, 1 mean, 2 min, 3 max (default 1)",
    )
    g.add_argument(
        "-z",
        "--blocking",
        type=int,
        choices=(0, 1),
        default=0,
        help="1: wait for completion and barrier after each collective",
    )
    t = parser.add_argument_group("torch.distributed")
    t.add_argument(
        "--backend",
        metavar="NAME",
        help="process-group backend: gloo, nccl, mpi, ... (default: nccl for "
        "--device cuda, gloo for --device cpu)",
    )
    t.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where the buffers live (default cpu)",
    )
    t.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")


def options_from_args(collective: str, args: argparse.Namespace) -> PerfOptions:
    """Validate the parsed flags together; a :class:`ValueError` names the flag to fix."""
    if args.stepfactor is not None and args.stepbytes is not None:
        raise ValueError(
            f"-f/--stepfactor {args.stepfactor} and -i/--stepbytes {format_size(args.stepbytes)} "
            "were both given; pass only one: -f for a geometric sweep, -i for a linear one"
        )
    if args.minbytes > args.maxbytes:
        raise ValueError(
            f"-b/--minbytes {format_size(args.minbytes)} is larger than -e/--maxbytes "
            f"{format_size(args.maxbytes)}; set -b at most -e"
        )
    if args.stepbytes == 0:
        raise ValueError("-i/--stepbytes 0 would never reach -e/--maxbytes; pass -i 1 or more")
    return PerfOptions(
        collective=collective,
        minbytes=args.minbytes,
        maxbytes=args.maxbytes,
        stepfactor=args.stepfactor or 1,
        stepbytes=args.stepbytes if args.stepbytes is not None else 1 << 20,
        iters=args.iters,
        warmup_iters=args.warmup_iters,
        check=args.check,
        ops=OPS if args.op == "all" else (args.op,),
        datatypes=DATATYPES if args.datatype == "all" else (args.datatype,),
        root=args.root,
        average=args.average,
        blocking=bool(args.blocking),
        backend=args.backend,
        device=args.device,
        json=args.json,
    )
