"""The torchrun environment, per rank: what torchrun's agent sets for a worker.

``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``GROUP_RANK``, ``ROLE_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``, ``TORCHELASTIC_*``. On the local and Slurm backends tenter's
host agent (:mod:`tenter.launch.agent`) sets them from this function with the values of each
rendezvous round (the plan shows the first round's); the mpirun shim sets them from it too; on
Kubernetes, torchrun in the pod does.
"""

from __future__ import annotations

from collections.abc import Mapping

from tenter.jobdir.layout import ERROR_FILE_SUFFIX, FINISHED_SUFFIX

SIGNALS_TO_HANDLE = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
"""torchrun's default ``--signals-to-handle``, which its agent exports to every worker."""


def finished_marker(error_file: str) -> str:
    """The file tenter's bootstrap writes next to a rank's error file once the user's script
    has returned (or called ``sys.exit(0)``): ``logs/rank-N.error.json`` ->
    ``logs/rank-N.finished``.

    A rank with this marker did all its work. A signal after it (native code crashing in
    interpreter teardown: gloo threads, a crash handler dumping threads at shutdown) is a
    crash at exit of a finished rank, never the job's root cause."""
    return error_file.removesuffix(ERROR_FILE_SUFFIX) + FINISHED_SUFFIX


def torchrun_env(
    *,
    rank: int,
    local_rank: int,
    group_rank: int,
    local_world_size: int,
    num_hosts: int,
    master_addr: str,
    master_port: str,
    run_id: str,
    max_restarts: int,
    restart_count: int = 0,
    use_agent_store: bool = True,
) -> dict[str, str]:
    """The variables torch elastic's local agent sets for one worker (role ``default``)."""
    world = local_world_size * num_hosts
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(local_rank),
        "WORLD_SIZE": str(world),
        "LOCAL_WORLD_SIZE": str(local_world_size),
        "GROUP_RANK": str(group_rank),
        "GROUP_WORLD_SIZE": str(num_hosts),
        "ROLE_NAME": "default",
        "ROLE_RANK": str(rank),
        "ROLE_WORLD_SIZE": str(world),
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": master_port,
        "TORCHELASTIC_RUN_ID": run_id,
        "TORCHELASTIC_RESTART_COUNT": str(restart_count),
        "TORCHELASTIC_MAX_RESTARTS": str(max_restarts),
        "TORCHELASTIC_USE_AGENT_STORE": str(use_agent_store),
    }


AGENT_PER_WORKER = frozenset(
    {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "TORCHELASTIC_ERROR_FILE", "TENTER_WATCH_FILE"}
)
"""What the host agent sets for each worker beside :func:`torchrun_env`'s variables."""


def shared_worker_env(
    environ: Mapping[str, str], pass_environment: str, plan_env: Mapping[str, str]
) -> dict[str, str]:
    """Every worker's environment on a host but its rank's variables: what the submitting
    shell passes on (``environ``: all of it, or none, as the plan's ``pass_environment``
    says), under the plan's environment of the host (``plan_env``: the plan's say wins)."""
    return {**(environ if pass_environment == "all" else {}), **plan_env}


def worker_env(
    shared: Mapping[str, str],
    torchrun: Mapping[str, str],
    error_file: str,
    watch_file: str | None,
) -> dict[str, str]:
    """A worker's whole environment as tenter's host agent starts it: ``shared`` (every
    worker's of the host, :func:`shared_worker_env`), the round's ``torchrun`` variables
    (:func:`torchrun_env`), and the agent's own (:data:`AGENT_PER_WORKER`)."""
    return {
        **shared,
        **torchrun,
        # torchrun's agent sets it unless its own environment does.
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": shared.get("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"),
        # torch's `record` (and tenter's bootstrap) write the worker's failure there.
        "TORCHELASTIC_ERROR_FILE": error_file,
        **({"TENTER_WATCH_FILE": watch_file} if watch_file is not None else {}),
    }


def per_worker_variables() -> frozenset[str]:
    """Every variable in which one worker's environment may differ from another's of the
    same host: :func:`torchrun_env`'s (whatever it sets) and the agent's own."""
    sample = torchrun_env(
        rank=0,
        local_rank=0,
        group_rank=0,
        local_world_size=1,
        num_hosts=1,
        master_addr="",
        master_port="",
        run_id="",
        max_restarts=0,
    )
    return frozenset(sample) | AGENT_PER_WORKER
