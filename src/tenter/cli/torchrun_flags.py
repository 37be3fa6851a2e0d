"""torchrun's flags on ``tenter run`` and ``tenter plan``: a torchrun command line with
``torchrun`` replaced by ``tenter run`` runs the same job (same ranks, working directory,
environment, restarts and log redirection); docs/launch.md has the table.

Each flag maps onto a spec field, as tenter's own flags do; a flag with no meaning on
tenter (``--node-rank``: tenter starts every host itself) is accepted with a note saying so.
The mapping is two steps: :func:`spec_overrides` from the flags alone (pure), then
:func:`console_overrides` once the instance type and the processes per host are known.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

from tenter.spec import InstanceType, JobSpec, Problem, SpecError, lookup, processes_per_host
from tenter.spec.gpus import GPU_INSTANCE_TYPE
from tenter.spec.validate import planned_hosts

START_METHODS = ("spawn", "fork", "forkserver")
NPROC_KINDS = ("auto", "cpu", "gpu")
_STD_VALUE = re.compile(r"^[0-3]$")
_STD_MAPPING = re.compile(r"^\d+:[0-3](,\d+:[0-3])*$")
ALL_STREAMS = 3
"""torch's ``Std.ALL``: stdout (1) | stderr (2)."""
_RDZV_BACKENDS = {"c10d": "c10d", "static": "c10d", "etcd": "etcd", "etcd-v2": "etcd"}
_RDZV_CONF_FIELDS = ("join_timeout", "last_call_timeout")

UNSUPPORTED = {
    "--run-path": "tenter always starts each rank as a process of its own",
    "--event-log-handler": "tenter records rendezvous rounds and restarts in events.jsonl",
    "--logs-specs": "tenter writes every rank's output to logs/rank-N.stdout|stderr",
    "--duplicate-stdout-filters": "filter the rank's log file instead (logs/rank-N.stdout)",
    "--duplicate-stderr-filters": "filter the rank's log file instead (logs/rank-N.stderr)",
    "--local-addr": "tenter gives each host its address (simulated hosts: 127.1NN.0.1; "
    "with --isolation network: 198.18.1NN.1 on eth0)",
    "--numa-binding": "not supported yet; bind in the script (os.sched_setaffinity)",
    "--signals-to-handle": "tenter forwards torchrun's default: SIGTERM, SIGINT, SIGHUP, SIGQUIT",
    "--shutdown-timeout": "not supported yet",
    "--virtual-local-rank": "not supported yet",
}
"""torchrun flags ``tenter run`` refuses, with what to do instead (exit 2)."""


def add_torchrun_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "torchrun's flags (a torchrun command line runs as is; see docs/launch.md)"
    )

    def flag(name: str, **kwargs: Any) -> None:
        group.add_argument(name, **kwargs)
        # torchrun accepts every flag with underscores too; kept out of --help.
        underscored = "--" + name[2:].replace("-", "_")
        if underscored != name:
            dest = name[2:].replace("-", "_")
            group.add_argument(underscored, **{**kwargs, "dest": dest, "help": argparse.SUPPRESS})

    flag("--nnodes", metavar="N|MIN:MAX", help="hosts (MIN:MAX: elastic, starts with MIN)")
    flag(
        "--nproc-per-node",
        metavar="N|auto|cpu|gpu",
        help="processes per host (auto: one per GPU, else one per CPU, as torchrun counts)",
    )
    flag("--max-restarts", type=int, metavar="N", help="worker-group restarts before failing")
    flag("--rdzv-backend", metavar="NAME", help="c10d (static: the same), etcd or etcd-v2")
    flag("--rdzv-endpoint", metavar="HOST:PORT", help="the etcd server (c10d: tenter's own store)")
    flag("--rdzv-id", metavar="ID", help="the job's name (the job id starts with it)")
    flag("--rdzv-conf", metavar="K=V,...", help="join_timeout, last_call_timeout")
    group.add_argument(
        "--standalone", action="store_true", help="a c10d rendezvous of the job's own"
    )
    flag("--node-rank", type=int, metavar="N", help="accepted; tenter starts every host")
    flag("--master-addr", metavar="ADDR", help="accepted; tenter uses rank 0's host")
    flag("--master-port", type=int, metavar="PORT", help="accepted; tenter picks a free port")
    flag("--log-dir", metavar="DIR", help="where job directories (and their logs/) are created")
    group.add_argument(
        "-r", "--redirects", metavar="STD", help="hide these streams from the console (files only)"
    )
    group.add_argument(
        "-t", "--tee", metavar="STD", help="show on the console and write files (tenter's default)"
    )
    flag("--local-ranks-filter", metavar="L[,L...]", help="console shows these local ranks only")
    flag("--start-method", choices=START_METHODS, help="accepted; a script is a subprocess")
    flag("--monitor-interval", type=float, metavar="S", help="accepted; tenter checks every 0.1 s")
    group.add_argument("--role", metavar="NAME", help="accepted; the role stays `default`")


def _problem(flag: str, what: str, fix: str) -> SpecError:
    return SpecError([Problem(flag, what, fix)])


def _nnodes(value: str) -> tuple[int, int]:
    parts = value.split(":")
    try:
        lo, hi = (int(parts[0]), int(parts[-1])) if len(parts) <= 2 else (0, -1)
    except ValueError:
        lo, hi = 0, -1
    if not 0 < lo <= hi:
        raise _problem(
            "--nnodes", f"'{value}' is not N or MIN:MAX", "give N or MIN:MAX with 0 < MIN <= MAX"
        )
    return lo, hi


def _rdzv_conf(value: str, notes: list[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in value.split(","):
        key, sep, val = item.partition("=")
        if not sep or not key:
            raise _problem("--rdzv-conf", f"'{item}' is not KEY=VALUE", "write KEY=VALUE,KEY=VALUE")
        if key not in _RDZV_CONF_FIELDS:
            notes.append(
                f"--rdzv-conf {key} is ignored: tenter takes {', '.join(_RDZV_CONF_FIELDS)}"
            )
            continue
        try:
            out[key] = int(val)
        except ValueError:
            raise _problem(
                "--rdzv-conf", f"{key}={val} is not whole seconds", f"write {key}=SECONDS"
            ) from None
    return out


def _job_name(rdzv_id: str) -> str:
    """A job name from a rendezvous id (``slurm_42`` -> ``slurm-42``): job names are DNS labels."""
    return re.sub(r"[^a-zA-Z0-9]+", "-", rdzv_id).strip("-")[:40]


def _either(args: argparse.Namespace, ours: str, theirs: str, value: Any) -> Any:
    """The value of two flags meaning one field: they must agree when both are given."""
    mine = getattr(args, ours.removeprefix("--").replace("-", "_"))
    if mine is not None and value is not None and mine != value:
        raise _problem(theirs, f"{value!r} contradicts {ours} {mine!r}", "give one of them")
    return value


_BOUNDS = {
    "max_restarts": ("--max-restarts", 0, None),
    "node_rank": ("--node-rank", 0, None),
    "master_port": ("--master-port", 0, 65535),
    "monitor_interval": ("--monitor-interval", 0.001, None),
}
"""dest -> (flag, least, most) of the numeric flags: checked here to name the flag."""


def _check_bounds(args: argparse.Namespace) -> None:
    for dest, (flag, least, most) in _BOUNDS.items():
        value = getattr(args, dest)
        if value is not None and (value < least or (most is not None and value > most)):
            allowed = f"from {least} to {most}" if most is not None else f"at least {least}"
            raise _problem(flag, f"{value} is out of range", f"give a value {allowed}")


def spec_overrides(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    """The spec fields torchrun's flags set, and notes on the flags tenter only accepts."""
    _check_bounds(args)
    out: dict[str, Any] = {}
    notes: list[str] = []
    elastic: dict[str, Any] = {}
    if args.nnodes is not None:
        lo, hi = _nnodes(args.nnodes)
        out["instance_count"] = _either(args, "--hosts", "--nnodes", lo)
        if lo != hi:
            elastic.update(min_hosts=lo, max_hosts=hi)
    if args.nproc_per_node is not None and args.nproc_per_node not in NPROC_KINDS:
        procs = int(args.nproc_per_node) if args.nproc_per_node.isdigit() else 0
        if procs < 1:
            raise _problem(
                "--nproc-per-node",
                f"'{args.nproc_per_node}' is not a number of processes",
                "give a number of at least 1, auto, cpu or gpu",
            )
        out["processes_per_host"] = _either(args, "--procs-per-host", "--nproc-per-node", procs)
    if args.max_restarts is not None:
        elastic["max_restarts"] = args.max_restarts
    rendezvous = _rendezvous(args, notes)
    if rendezvous:
        elastic["rendezvous"] = rendezvous
    if elastic:
        out["elastic"] = elastic
    if args.rdzv_id and not args.standalone and _job_name(args.rdzv_id):
        out["name"] = _either(args, "--name", "--rdzv-id", _job_name(args.rdzv_id))
    if args.log_dir:
        log_dir = os.path.abspath(args.log_dir)
        if args.output_dir and os.path.abspath(args.output_dir) != log_dir:
            raise _problem("--log-dir", f"contradicts --output-dir {args.output_dir}", "give one")
        out["output_dir"] = log_dir
    notes += _accepted_notes(args)
    return out, notes


def _rendezvous(args: argparse.Namespace, notes: list[str]) -> dict[str, Any]:
    if args.standalone:
        if args.rdzv_backend or args.rdzv_endpoint or args.rdzv_id:
            notes.append("--standalone: the --rdzv-* flags are ignored, as torchrun does")
        return {"backend": "c10d"}
    out: dict[str, Any] = {}
    if args.rdzv_backend is not None:
        if args.rdzv_backend not in _RDZV_BACKENDS:
            raise _problem(
                "--rdzv-backend",
                f"'{args.rdzv_backend}' is not a rendezvous backend tenter knows",
                f"give one of {', '.join(_RDZV_BACKENDS)}",
            )
        out["backend"] = _RDZV_BACKENDS[args.rdzv_backend]
    if args.rdzv_endpoint:
        if out.get("backend") == "etcd":
            out["endpoint"] = args.rdzv_endpoint
        else:
            notes.append(
                f"--rdzv-endpoint {args.rdzv_endpoint} is ignored: tenter serves the job's c10d "
                "store itself, on a free port"
            )
    if args.rdzv_conf:
        out.update(_rdzv_conf(args.rdzv_conf, notes))
    return out


def _accepted_notes(args: argparse.Namespace) -> list[str]:
    """What tenter does instead for the flags that have no effect of their own."""
    notes = []
    if args.node_rank is not None:
        notes.append(
            f"--node-rank {args.node_rank} is ignored: tenter starts every host of the job and "
            "host i gets group rank i (no command per node to tell apart)"
        )
    if args.master_addr is not None or args.master_port is not None:
        notes.append(
            "--master-addr/--master-port are ignored: tenter picks a free port per job (two "
            "jobs on one machine never clash, as a fixed 29500 would); MASTER_ADDR and "
            "MASTER_PORT name rank 0's host and that port"
        )
    if args.start_method is not None:
        notes.append(
            f"--start-method {args.start_method} has no effect, as under torchrun: a script "
            "runs as a subprocess"
        )
    if args.monitor_interval is not None:
        notes.append(
            "--monitor-interval: tenter's hosts check their workers every 0.1 s (torchrun's "
            "default)"
        )
    if args.role is not None and args.role != "default":
        notes.append(f"--role {args.role}: ROLE_NAME stays `default` (one role per job)")
    return notes


def _std(value: str, flag: str, procs: int) -> dict[int, int]:
    """torchrun's ``Std`` syntax (``3``, ``0:3,1:2``) -> local rank -> streams."""
    if _STD_VALUE.match(value):
        return dict.fromkeys(range(procs), int(value))
    if _STD_MAPPING.match(value):
        pairs = (item.split(":") for item in value.split(","))
        return {int(rank): int(streams) for rank, streams in pairs}
    raise _problem(
        flag,
        f"'{value}' is not 0-3 or LOCAL_RANK:0-3,...",
        "give 0-3 or LOCAL_RANK:0-3,... (1 stdout, 2 stderr, 3 both)",
    )


def resolved_procs(nproc: str, itype: InstanceType, hosts: int) -> int:
    """``--nproc-per-node auto|cpu|gpu`` counted as torchrun counts them on the job's hosts
    (simulated hosts: each host's share of this machine's GPUs)."""
    # torchrun counts the CPUs this process may use (its affinity), not the machine's.
    cpus = len(os.sched_getaffinity(0)) if itype.is_local else itype.cpus
    if nproc == "gpu" and not itype.gpus:
        raise _problem("--nproc-per-node", f"gpu: {itype.name} has no GPUs", "give a number")
    if nproc == "cpu" or not itype.gpus:
        return cpus
    # Fewer GPUs than hosts: one each, which `gpu` then refuses, saying what fits.
    return max(1, itype.gpus // hosts) if itype.is_local else itype.gpus


def console_overrides(args: argparse.Namespace, spec: JobSpec) -> tuple[dict[str, Any], list[str]]:
    """``--nproc-per-node auto|cpu|gpu``, ``-r``, ``-t`` and ``--local-ranks-filter``: they
    need the job's processes per host, known once the spec is loaded."""
    out: dict[str, Any] = {}
    notes: list[str] = []
    itype = lookup(spec.instance_type)
    assert itype is not None, "the spec check rejects unknown instance types"
    procs = processes_per_host(spec, itype)
    if args.nproc_per_node in NPROC_KINDS:
        procs = resolved_procs(args.nproc_per_node, itype, planned_hosts(spec))
        out["processes_per_host"] = procs
        if args.nproc_per_node == "gpu" and spec.instance_type == "local":
            # A GPU per rank, asked for: refused before launch when they do not fit.
            out["instance_type"] = GPU_INSTANCE_TYPE
    if not (args.redirects or args.tee or args.local_ranks_filter):
        return out, notes
    if args.ranks:
        raise _problem(
            "--ranks",
            "is given with torchrun's -r/-t/--local-ranks-filter",
            "give --ranks or torchrun's -r/-t/--local-ranks-filter, not both",
        )
    redirects = _std(args.redirects or "0", "--redirects", procs)
    tee = _std(args.tee or "0", "--tee", procs)
    shown = set(range(procs))
    if args.local_ranks_filter:
        try:
            shown = {int(r) for r in args.local_ranks_filter.split(",")}
        except ValueError:
            raise _problem(
                "--local-ranks-filter",
                f"'{args.local_ranks_filter}' is not a list of local ranks",
                "give a list like 0,1,2",
            ) from None
    for local in range(procs):
        # A stream redirected to a file and not tee'd is off the console (torch's rule).
        hidden = redirects.get(local, 0) & ~tee.get(local, 0)
        if hidden == ALL_STREAMS:
            shown.discard(local)
        elif hidden and local in shown:
            notes.append(
                f"local rank {local}: tenter shows or hides a rank's stdout and stderr "
                "together; both stay on the console (each is in its log file)"
            )
    shown &= set(range(procs))
    if shown != set(range(procs)):
        ranks = [host * procs + local for host in range(spec.instance_count) for local in shown]
        out["logs"] = {"ranks": sorted(ranks)}
    return out, notes
