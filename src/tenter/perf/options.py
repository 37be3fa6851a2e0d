"""The flags of ``tenter perf COLLECTIVE``: nccl-tests' spelling, meaning and defaults.

Parsed and validated here once, for the ``tenter perf`` command (which launches the job)
and for the worker (``python -m tenter.perf``, which runs under any launcher). This module
imports no torch, so that the CLI answers ``--help`` and flag errors at once. Every flag of
nccl-tests' ``getopt`` string is registered: the ones with a torch.distributed meaning here,
the ones without (only their default accepted) in :mod:`tenter.perf.nccl_only`.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass

from tenter.perf import nccl_only

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

OPS = ("sum", "prod", "max", "min", "avg", "mulsum")
"""nccl-tests' reductions, in its order (``-o all`` runs them in this order)."""
DATATYPES = (
    "int8",
    "uint8",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "half",
    "float",
    "double",
    "bfloat16",
    "f8e4m3",
    "f8e5m2",
)
"""nccl-tests' element types, in its order (``-d all``; it lists the fp8 types on Hopper and
later, where NCCL reduces them)."""
AVERAGES = {0: "rank 0", 1: "mean", 2: "min", 3: "max"}
"""``-a``: how the per-rank times of one size combine into the reported time."""
BLOCKING = {
    0: "no wait: the device is synchronised once, after the timed calls",
    1: "wait for completion and barrier after each call",
    2: "wait for completion after each call, no barrier",
    3: "wait after each call and barrier after each -n iteration; the barrier is not timed",
}
"""``-z``: nccl-tests' blocking modes."""

# nccl-tests reads sizes with sscanf("%lf %1s"): a decimal number, then an optional unit.
_SIZE = re.compile(r"^((?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)\s*([KMG]?)B?$", re.IGNORECASE)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """``8``, ``64K``, ``128M``, ``0.5G`` (binary units; fractions truncate to whole bytes,
    as nccl-tests reads them)."""
    match = _SIZE.match(text.strip())
    if not match:
        raise argparse.ArgumentTypeError(
            f"'{text}' is not a size; write bytes as a number with an optional K, M or G "
            "suffix (binary), e.g. 8, 64K, 128M, 0.5G"
        )
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()])


def format_size(nbytes: int) -> str:
    """The shortest exact K/M/G spelling of ``nbytes`` (the inverse of :func:`parse_size`)."""
    for unit in ("G", "M", "K"):
        if nbytes and nbytes % _UNITS[unit] == 0:
            return f"{nbytes // _UNITS[unit]}{unit}"
    return str(nbytes)


def _int_in(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """A whole number in ``minimum..maximum``; base prefixes (0x) as nccl-tests' strtol."""

    def convert(text: str) -> int:
        try:
            value = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below the minimum of {minimum}")
        if maximum is not None and value > maximum:
            raise argparse.ArgumentTypeError(
                f"{value} is not one of {', '.join(map(str, range(minimum, maximum + 1)))}"
            )
        return value

    return convert


@dataclass(frozen=True)
class PerfOptions:
    """One benchmark run, as the flags describe it (validated)."""

    collective: str
    minbytes: int = 32 << 20
    maxbytes: int = 32 << 20
    stepfactor: int = 1
    """Multiply the size by this after each row; 0 or 1: add ``stepbytes`` instead."""
    stepbytes: int = 1 << 20
    iters: int = 20
    agg_iters: int = 1
    """``-m``: collectives per timed iteration; the time is per collective."""
    warmup_iters: int = 1
    run_cycles: int = 1
    """``-N``: sweeps to run and print; 0: until interrupted."""
    check: int = 1
    """Number of checked runs per row half (nccl-tests' ``-c``); 0: no check."""
    ops: tuple[str, ...] = ("sum",)
    datatypes: tuple[str, ...] = ("float",)
    root: int = 0
    average: int = 1
    blocking: int = 0
    """``-z``: one of :data:`BLOCKING`."""
    timeout: int = 0
    """``-T``: seconds a collective may take before the job fails; 0: torch's default."""
    report_cputime: bool = False
    report_timestamps: bool = False
    memory_report: bool = False
    unalign: int = 0
    """``-u``: the buffers start this many elements past an aligned address."""
    per_iter_timing: bool = False
    per_iter_skip: int = 0
    parallel_init: bool = False
    """``-p``: accepted for nccl-tests' command lines; each rank is its own process, so its
    process group is always initialised in parallel with the others."""
    backend: str | None = None
    """The torch.distributed backend; None: NCCL for CUDA tensors, gloo for CPU tensors."""
    device: str = "cpu"
    output_file: str | None = None
    """``-J``: nccl-tests' JSON results file."""

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
        numbers = {
            "-n": self.iters,
            "-m": self.agg_iters,
            "-w": self.warmup_iters,
            "-N": self.run_cycles,
            "-c": self.check,
            "-r": self.root,
            "-a": self.average,
            "-z": self.blocking,
            "-T": self.timeout,
            "-C": int(self.report_cputime),
            "-S": int(self.report_timestamps),
            "-M": int(self.memory_report),
            "-u": self.unalign,
            "-I": int(self.per_iter_timing),
            "-K": self.per_iter_skip,
            "-p": int(self.parallel_init),
        }
        argv = [
            self.collective,
            *("-b", str(self.minbytes), "-e", str(self.maxbytes), *step),
            *(item for flag, value in numbers.items() for item in (flag, str(value))),
            *("-o", _all_or_list(self.ops, OPS), "-d", _all_or_list(self.datatypes, DATATYPES)),
            *("--device", self.device),
        ]
        if self.backend:
            argv += ["--backend", self.backend]
        if self.output_file:
            argv += ["-J", self.output_file]
        return argv


def _all_or_list(chosen: tuple[str, ...], every: tuple[str, ...]) -> str:
    return "all" if chosen == every else ",".join(chosen)


def _switch(text: str) -> int:
    """nccl-tests' 0/1 flags."""
    return _int_in(0, 1)(text)


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Register the benchmark flags on ``parser`` (nccl-tests' short and long names)."""
    sweep = parser.add_argument_group("sweep (nccl-tests flags)")
    _add_size_flags(sweep)
    _add_run_flags(sweep)
    nccl_only.add_flags(parser.add_argument_group("nccl-tests flags without a torch meaning"))
    _add_torch_flags(parser.add_argument_group("torch.distributed"))


def _add_size_flags(g: argparse._ArgumentGroup) -> None:
    """The message sizes of the sweep's rows."""
    g.add_argument(
        "-b",
        "--minbytes",
        type=parse_size,
        default=32 << 20,
        metavar="SIZE",
        help="smallest message size, e.g. 8, 64K, 1M, 0.5G (default 32M)",
    )
    g.add_argument(
        "-e",
        "--maxbytes",
        type=parse_size,
        default=32 << 20,
        metavar="SIZE",
        help="largest message size (default 32M)",
    )
    g.add_argument(
        "-f",
        "--stepfactor",
        type=_int_in(0),
        metavar="N",
        help="multiply the size by N between rows (0 or 1: add -i instead)",
    )
    g.add_argument(
        "-i",
        "--stepbytes",
        type=parse_size,
        metavar="SIZE",
        help="add SIZE between rows (default 1M when -f is not above 1)",
    )


def _add_run_flags(g: argparse._ArgumentGroup) -> None:
    """How each size runs, is checked and reported."""

    def number(
        short: str, long: str, convert: Callable[[str], int], default: int, doc: str
    ) -> None:
        g.add_argument(short, long, type=convert, default=default, metavar="N", help=doc)

    number("-n", "--iters", _int_in(1), 20, "timed iterations per size (default 20)")
    number("-m", "--agg_iters", _int_in(1), 1, "collectives per timed iteration (default 1)")
    number("-w", "--warmup_iters", _int_in(0), 1, "untimed calls per size first (default 1)")
    number("-N", "--run_cycles", _int_in(0), 1, "run and print the sweep N times; 0: forever")
    number("-c", "--check", _int_in(0), 1, "checked runs per size; 0: no check (default 1)")
    g.add_argument("-o", "--op", choices=(*OPS, "all"), default="sum", help="reduction")
    g.add_argument(
        "-d", "--datatype", choices=(*DATATYPES, "all"), default="float", help="element type"
    )
    number("-r", "--root", _int_in(0), 0, "root rank of broadcast and reduce (default 0)")
    number(
        "-a",
        "--average",
        _int_in(0, 3),
        1,
        "combine per-rank times: 0 rank 0, 1 mean, 2 min, 3 max (default 1)",
    )
    number(
        "-z",
        "--blocking",
        _int_in(0, 3),
        0,
        "; ".join(f"{k}: {v}" for k, v in BLOCKING.items()) + " (default 0)",
    )
    number("-T", "--timeout", _int_in(0), 0, "fail a collective after N seconds; 0: torch's")
    number("-C", "--report_cputime", _switch, 0, "1: report the time to launch the calls")
    number("-S", "--report_timestamps", _switch, 0, "1: end each row with the time of day")
    number("-M", "--memory", _switch, 0, "1: report the memory the run used")
    number("-u", "--unalign", _int_in(0), 0, "start the buffers N elements off alignment")
    number("-I", "--per_iter_timing", _switch, 0, "1: time each iteration (i_min ... i_cv%%)")
    number("-K", "--per_iter_skip", _int_in(0), 0, "leave the first N out of the -I stats")
    number("-p", "--parallel_init", _switch, 0, "accepted; every rank initialises in parallel")
    g.add_argument(
        "-J",
        "--output_file",
        "--json",
        dest="output_file",
        metavar="FILE.json",
        help="also write nccl-tests' JSON results to FILE.json (FILE.json.0, .1, ... if taken)",
    )


def _add_torch_flags(t: argparse._ArgumentGroup) -> None:
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


def options_from_args(collective: str, args: argparse.Namespace) -> PerfOptions:
    """Validate the parsed flags together; a :class:`ValueError` names the flag to fix."""
    stepfactor = args.stepfactor if args.stepfactor is not None else 1
    if stepfactor > 1 and args.stepbytes is not None:
        raise ValueError(
            f"-f/--stepfactor {stepfactor} and -i/--stepbytes {format_size(args.stepbytes)} "
            "were both given; pass only one: -f for a geometric sweep, -i for a linear one"
        )
    if args.minbytes > args.maxbytes:
        raise ValueError(
            f"-b/--minbytes {format_size(args.minbytes)} is larger than -e/--maxbytes "
            f"{format_size(args.maxbytes)}; set -b at most -e"
        )
    if args.stepbytes == 0:
        raise ValueError("-i/--stepbytes 0 would never reach -e/--maxbytes; pass -i 1 or more")
    if stepfactor > 1 and args.minbytes == 0:
        raise ValueError(
            f"-b/--minbytes 0 with -f/--stepfactor {stepfactor} would never grow; pass -b 1 or more"
        )
    if args.per_iter_skip and not args.per_iter_timing:
        raise ValueError(
            f"-K/--per_iter_skip {args.per_iter_skip} leaves iterations out of the "
            "per-iteration statistics, which only -I 1 reports; add -I 1 or drop -K"
        )
    if args.per_iter_skip >= args.iters:
        raise ValueError(
            f"-K/--per_iter_skip {args.per_iter_skip} would skip all {args.iters} timed "
            f"iterations (-n); pass -K below {args.iters}"
        )
    if args.output_file is not None and not args.output_file.lower().endswith(".json"):
        raise ValueError(
            f"-J/--output_file {args.output_file}: nccl-tests infers the format from the "
            "suffix and writes only JSON (anything else is silently dropped); name the "
            "file *.json"
        )
    return PerfOptions(
        collective=collective,
        minbytes=args.minbytes,
        maxbytes=args.maxbytes,
        stepfactor=stepfactor,
        stepbytes=args.stepbytes if args.stepbytes is not None else 1 << 20,
        iters=args.iters,
        agg_iters=args.agg_iters,
        warmup_iters=args.warmup_iters,
        run_cycles=args.run_cycles,
        check=args.check,
        ops=OPS if args.op == "all" else (args.op,),
        datatypes=DATATYPES if args.datatype == "all" else (args.datatype,),
        root=args.root,
        average=args.average,
        blocking=args.blocking,
        timeout=args.timeout,
        report_cputime=bool(args.report_cputime),
        report_timestamps=bool(args.report_timestamps),
        memory_report=bool(args.memory),
        unalign=args.unalign,
        per_iter_timing=bool(args.per_iter_timing),
        per_iter_skip=args.per_iter_skip,
        parallel_init=bool(args.parallel_init),
        backend=args.backend,
        device=args.device,
        output_file=args.output_file,
    )
