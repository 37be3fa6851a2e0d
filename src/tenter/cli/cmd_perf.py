"""``tenter perf``: nccl-tests' collective benchmark on any torch.distributed backend.

    tenter perf all_reduce -b 8 -e 128M -f 2 -n 20 -w 5 -c 1 --hosts 2 --procs-per-host 2
    tenter perf alltoall -b 1K -e 1M -f 4 -d all -J a2a.json   # nccl-tests' JSON file
    tenter perf all_reduce -b 8 -e 1M --launcher mpi   # ranks started by mpirun
    tenter perf all_reduce -b 8 -e 1M --hosts 2 --isolation network   # hosts apart
    tenter perf compare a.log b.json --labels "4 EFA,socket" --plot busbw.png

A collective runs as a tenter job (module ``tenter.perf``, console showing rank 0 untagged,
so the table prints as nccl-tests prints it); the same worker runs under a plain torchrun:
``torchrun --nproc-per-node 4 -m tenter.perf all_reduce -b 8 -e 1M -f 2``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
from functools import partial
from pathlib import Path
from typing import Any

from tenter.perf.options import COLLECTIVES, add_flags, options_from_args

EXIT_USAGE = 2


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "perf",
        help="benchmark collectives (nccl-tests layout) or compare benchmark logs",
        description="Benchmark a collective across the ranks of a job, printing nccl-tests' "
        "table (time, algbw, busbw, #wrong per size), or compare such logs.",
    )
    perf = parser.add_subparsers(dest="perf_command", metavar="COLLECTIVE|compare", required=True)
    for name in COLLECTIVES:
        coll = perf.add_parser(name, help=f"benchmark {name} ({name}_perf)")
        add_flags(coll)
        job = coll.add_argument_group("job")
        job.add_argument(
            "--hosts", type=int, default=1, metavar="N", help="simulated hosts (default 1)"
        )
        job.add_argument(
            "--procs-per-host", type=int, default=2, metavar="N", help="ranks per host (default 2)"
        )
        job.add_argument(
            "--isolation",
            choices=("none", "network"),
            default="none",
            help="network: each host in namespaces of its own, so that the traffic between "
            "hosts crosses a network (default none)",
        )
        # --backend already names the torch.distributed backend (gloo, nccl, mpi).
        job.add_argument(
            "--launcher",
            default="local",
            metavar="NAME",
            help="the launch backend that starts the ranks: local (default), mpi or slurm",
        )
        coll.set_defaults(func=partial(run_collective, name, coll))
    cmp = perf.add_parser("compare", help="compare nccl-tests / tenter perf logs")
    cmp.add_argument(
        "logs",
        nargs="+",
        metavar="LOG",
        help="benchmark logs or -J JSON files, nccl-tests' or tenter's (the first is the base)",
    )
    cmp.add_argument(
        "--labels", help="comma-separated run names, one per log (default: file names)"
    )
    cmp.add_argument("--plot", metavar="PNG", help="write busbw vs size to this PNG")
    cmp.add_argument("--json", metavar="PATH", help="write the comparison as JSON")
    cmp.set_defaults(func=partial(run_compare, cmp))


def run_collective(name: str, parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    try:
        opts = options_from_args(name, args)
    except ValueError as e:
        parser.error(str(e))
    for flag, value in (("--hosts", args.hosts), ("--procs-per-host", args.procs_per_host)):
        if value < 1:
            parser.error(f"{flag} {value}: a job needs at least 1; pass {flag} 1 or more")
    nranks = args.hosts * args.procs_per_host
    if opts.root >= nranks:
        parser.error(
            f"-r/--root {opts.root} is not a rank of this job ({nranks} ranks: --hosts "
            f"{args.hosts} x --procs-per-host {args.procs_per_host}); pass -r below {nranks}"
        )
    from tenter.perf import harness  # imports torch: only once the flags parse
    from tenter.perf.collectives import COLLECTIVES as DEFINITIONS

    backend = opts.backend or ("nccl" if opts.device == "cuda" else "gloo")
    try:
        harness.refuse_what_cannot_run(DEFINITIONS[name], opts, backend, nranks)
    except harness.PerfError as e:
        parser.error(str(e))
    if opts.output_file:
        # The ranks run in the job's directory: give them an absolute path.
        results = Path(opts.output_file).resolve()
        if not results.parent.is_dir() or not os.access(results.parent, os.W_OK):
            parser.error(
                f"-J/--output_file {opts.output_file}: cannot write in {results.parent}; "
                "name a file in an existing, writable directory"
            )
        opts = dataclasses.replace(opts, output_file=str(results))

    from tenter import session  # imports torch: only once the flags are known good
    from tenter.cli.parsing import stderr
    from tenter.spec import load
    from tenter.spec.gpus import GPU_INSTANCE_TYPE

    spec, _ = load(
        {
            "name": f"perf-{name.replace('_', '-')}",
            "module": "tenter.perf",
            "args": opts.argv(),
            "instance_count": args.hosts,
            "processes_per_host": args.procs_per_host,
            "backend": args.launcher,
            # CUDA buffers need a GPU per rank: refused before launch when they do not fit.
            **({"instance_type": GPU_INSTANCE_TYPE} if opts.device == "cuda" else {}),
            "isolation": args.isolation,
            "logs": {"ranks": [0], "tag": False},
        },
        base_dir=Path.cwd(),
    )
    result = session.run(spec)
    if not result.ok:
        stderr.print(result.summary, markup=False)
    return result.exit_code


def run_compare(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from tenter.perf.compare import Run, format_table, plot, to_json
    from tenter.perf.results_json import read_results

    labels = [s.strip() for s in args.labels.split(",")] if args.labels else None
    if labels is not None and len(labels) != len(args.logs):
        parser.error(
            f"--labels names {len(labels)} run(s) but {len(args.logs)} log(s) were given; "
            "give one label per log, comma-separated"
        )
    runs = []
    for i, path in enumerate(args.logs):
        try:
            log = read_results(Path(path))
        except OSError as e:
            parser.error(f"cannot read log {path}: {e.strerror}")
        except ValueError as e:
            parser.error(str(e))
        if not log.rows:
            parser.error(
                f"{path} has no benchmark rows: expected an nccl-tests or tenter perf table "
                "(a '#  size  count ...' header followed by rows) or -J JSON file"
            )
        runs.append(Run(labels[i] if labels else Path(path).stem, path, log))
    print(format_table(runs), end="")
    if args.json:
        Path(args.json).write_text(json.dumps(to_json(runs), indent=2) + "\n")
    if args.plot:
        try:
            plot(runs, Path(args.plot))
        except ImportError:
            parser.error("--plot needs matplotlib; install it with: pip install 'tenter[plot]'")
    return 0
