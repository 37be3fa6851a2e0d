"""``python -m tenter.runtime.mpi_shim COMMAND [ARGS...]``: a rank started by mpirun becomes a
torch rank, then ``exec``s COMMAND.

mpirun gives each rank ``OMPI_COMM_WORLD_RANK``/``_SIZE``; the worker contract of its host
(``TENTER_HOST_INDEX``, ``TENTER_NUM_HOSTS``, ``SM_*``...) is the plan's, composed by
:meth:`tenter.contract.plan.Plan.process_env` (:func:`planned_env`) under the variables
mpirun's ``-x`` gives (``MASTER_ADDR``/``MASTER_PORT``, the user's; listed in
``TENTER_MPIRUN_ENV``). ``TENTER_PLAN`` says where the plan is: the job directory's
``plan.json``, which every host of the mpi backend reads, or the address of a Kubernetes
MPIJob's launcher (``http://ADDR:PORT``), which serves each rank its environment, since its
workers share no file system with it (:mod:`tenter.launch.backends.kubernetes.mpi_launcher`).
The shim adds the per-rank torchrun variables with the same
function every backend uses (:func:`tenter.contract.torchrun.torchrun_env`), so a plain
``init_process_group("gloo")`` script works unchanged under mpirun. ``LOCAL_RANK`` is
``RANK - host index * processes per host``, not ``OMPI_COMM_WORLD_LOCAL_RANK``: they agree on a
real cluster, and only the former is right when several simulated hosts share this machine.

With ``TENTER_RANK_LOGS`` set (the mpi backend), the rank's stdout and stderr go to
``logs/rank-N.stdout|.stderr`` and failures to ``rank-N.error.json``, as on every backend,
listed in ``logs/index.jsonl`` for the console and the failure report; with
``TENTER_RANK_WATCH`` set too (a job with ``elastic.hang_timeout``), its progress record goes to
``rank-N.watch`` (``TENTER_WATCH_FILE``, as tenter's agent sets it for each worker), which the
launcher's hang watch reads.

The rank stops (SIGTERM) when the process that started it (mpirun, or Open MPI's daemon on
another host) ends, however it ends: mpirun stopped by its launcher's death does not always
stop its ranks first, and a rank left running would hold its host.

Imports nothing heavy: it runs once per rank before the real program starts.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from tenter.contract.plan import Plan
from tenter.contract.torchrun import torchrun_env
from tenter.jobdir import layout, private
from tenter.jobdir.line_files import record_worker_logs
from tenter.runtime.parent_death import dies_with_parent

PLAN_ENV = "TENTER_PLAN"
"""Where the shim finds the plan (:func:`tenter.launch.backends.mpirun.mpirun_argv`'s
``plan_source``): a file, or an ``http://`` server of each rank's environment at :data:`RANK_PATH`
``N``."""
RANK_PATH = "/rank/"
FETCH_TIMEOUT_S = 60
"""How long a rank waits for its environment from the launcher, which serves it before it
starts mpirun: only a launcher gone or unreachable makes it wait this long."""
GIVEN_ENV = "TENTER_MPIRUN_ENV"
"""The names of the variables mpirun's ``-x`` gives, which stand over the plan's."""
LAUNCH_ENV = (PLAN_ENV, GIVEN_ENV, private.TOKEN_ENV)
RANK_LOGS_ENV = "TENTER_RANK_LOGS"
"""Where the rank's logs go (the job directory's ``logs``), when the launcher reads them."""
RANK_WATCH_ENV = "TENTER_RANK_WATCH"
"""Set (with :data:`RANK_LOGS_ENV`) when the launcher watches for hangs: the rank writes its
progress record beside its logs."""
SHIM_ENV = (RANK_LOGS_ENV, RANK_WATCH_ENV)
"""Instructions to the shim, not part of the worker contract: the worker never sees them, as
the plan it runs does not name them."""


def planned_env(plan: Plan, rank: int) -> dict[str, str]:
    """The plan's environment of job rank ``rank`` (hosts hold their ranks in order)."""
    host = plan.hosts[rank // plan.procs_per_host]
    return plan.process_env(host, host.ranks[rank % plan.procs_per_host])


def _fetch_env(url: str, rank: int, token: str) -> dict[str, str]:
    # Here, not at the top: urllib.request is half of the shim's import time (24 of 53 ms),
    # and only a Kubernetes MPIJob's ranks fetch.
    import gzip
    import urllib.request

    request = urllib.request.Request(f"{url}{RANK_PATH}{rank}", headers=private.bearer(token))
    with urllib.request.urlopen(request, timeout=FETCH_TIMEOUT_S) as reply:
        env: dict[str, str] = json.loads(gzip.decompress(reply.read()))
    return env


def contract_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The plan's environment of the rank mpirun started in ``environ`` (empty without a
    plan), less what mpirun's ``-x`` gives."""
    source = environ.get(PLAN_ENV)
    if not source:
        return {}
    rank = int(environ["OMPI_COMM_WORLD_RANK"])
    if source.startswith("http://"):
        try:
            env = _fetch_env(source, rank, environ.get(private.TOKEN_ENV, ""))
        except OSError as e:  # refused, timed out, or an HTTP error: the rank cannot start
            raise SystemExit(
                f"error: rank {rank} could not fetch its environment from "
                f"{source}{RANK_PATH}{rank}: {e}; the MPIJob's launcher serves it while "
                "mpirun runs (is its pod running and reachable from this worker?)"
            ) from None
    else:
        env = planned_env(Plan.from_json(Path(source).read_text()), rank)
    given = set(environ.get(GIVEN_ENV, "").split(","))
    return {k: v for k, v in env.items() if k not in given}


def rank_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The torchrun variables of the rank mpirun started in ``environ``."""
    rank = int(environ["OMPI_COMM_WORLD_RANK"])
    world = int(environ["OMPI_COMM_WORLD_SIZE"])
    hosts = int(environ["TENTER_NUM_HOSTS"])
    host_index = int(environ["TENTER_HOST_INDEX"])
    per_host = world // hosts
    env = torchrun_env(
        rank=rank,
        local_rank=rank - host_index * per_host,
        group_rank=host_index,
        local_world_size=per_host,
        num_hosts=hosts,
        master_addr=environ["MASTER_ADDR"],
        master_port=environ["MASTER_PORT"],
        run_id=environ["TENTER_JOB_ID"],
        max_restarts=0,
        # Whether the launcher serves the store (mpirun_argv's agent_store) or rank 0 does.
        use_agent_store=environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
    )
    logs = environ.get(RANK_LOGS_ENV)
    if logs:
        stem = layout.rank_log_stem(logs, rank)
        env["TORCHELASTIC_ERROR_FILE"] = layout.error_file(stem)
        if environ.get(RANK_WATCH_ENV):
            env["TENTER_WATCH_FILE"] = layout.watch_file(stem)
    return env


def _redirect_output(logs: Path, env: Mapping[str, str]) -> None:
    """stdout/stderr to the rank's files, listed in the job's log index."""
    rank = env["RANK"]
    stem = layout.rank_log_stem(logs, int(rank))
    for fd, stream in ((1, "stdout"), (2, "stderr")):
        target = os.open(f"{stem}.{stream}", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(target, fd)
        os.close(target)
    record_worker_logs(
        logs,
        str(stem),
        int(rank),
        int(env["LOCAL_RANK"]),
        os.environ["TENTER_HOST"],
        attempt=0,
        world_size=int(env["WORLD_SIZE"]),
    )


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m tenter.runtime.mpi_shim COMMAND [ARGS...]", file=sys.stderr)
        return 2
    os.environ.update(contract_env(os.environ))
    for name in LAUNCH_ENV:  # how the contract came, not part of it
        os.environ.pop(name, None)
    env = rank_env(os.environ)
    os.environ.update(env)
    logs, _ = (os.environ.pop(name, None) for name in SHIM_ENV)
    if logs:
        _redirect_output(Path(logs), env)
    # torch writes a failing rank's error there, and fails with a FileNotFoundError in place
    # of the rank's own error where no launcher made the folder (a Kubernetes MPIJob's worker
    # shares no job directory with its launcher).
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file:
        Path(error_file).parent.mkdir(parents=True, exist_ok=True)
    dies_with_parent(signal.SIGTERM, starter=os.getppid())()  # it survives exec
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
