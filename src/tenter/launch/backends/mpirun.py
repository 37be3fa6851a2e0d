"""The ``mpirun`` command of a job: a pure function, shared by the mpi backend and by launchers
that run mpirun themselves (a Kubernetes MPIJob's launcher pod).

One MPMD app context per host::

    mpirun <global flags: --tag-output, binding, mapping, --mca ...>
        -np 8 --host algo-1:8 -x TENTER_PLAN=<plan> python -m tenter.runtime.mpi_shim CMD
      : -np 8 --host algo-2:8 -x TENTER_PLAN=<plan> python -m tenter.runtime.mpi_shim CMD

Why per-host app contexts: the worker contract has per-host values (``SM_CURRENT_HOST``,
``SM_TRAINING_ENV``, ``SM_RESOURCE_CONFIG``, the host's ``/opt/ml`` paths, ``TENTER_HOST*``).
SageMaker's toolkit runs a single context with ``-x SM_CURRENT_HOST``, which forwards the
master's value to every rank (every rank believes it is on algo-1; the toolkit then
``LD_PRELOAD``s a gethostname shim to paper over it). Each rank's shim finds its host's exact
environment in the plan, composed by the one function every backend uses
(:meth:`tenter.contract.plan.Plan.process_env`), as ``tenter plan`` shows it: in
``plan.json`` in the job directory, on every host (the mpi backend), or served by a
Kubernetes MPIJob's launcher. The command line carries only where the plan is and the
variables of mpirun's own (``MASTER_*``, the user's ``-x``), so it grows with the hosts, not
their square (146 MB at 1,024 p5 hosts when it carried every host's environment).
Ranks are numbered in context order, so host ``i`` holds ranks ``i*P .. i*P+P-1``, the
same ranks as on every other backend; ``tenter.runtime.mpi_shim`` adds the per-rank torchrun
variables (``RANK``, ``LOCAL_RANK``, ...) from ``OMPI_COMM_WORLD_*`` before the command runs.

Every default is data below (``mca_defaults``, ``FLAG_DEFAULTS``, and the fabric table of
:mod:`tenter.contract.fabric`); the user's
``custom_mpi_options`` replace a default of the same MCA parameter, ``-x`` variable or flag
instead of repeating it (mpirun rejects a repeated ``--bind-to``; SageMaker cannot remove its
defaults, sagemaker-training-toolkit issue #70).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tenter.contract.fabric import fabric_env
from tenter.contract.placeholders import MASTER_PORT
from tenter.contract.plan import Plan
from tenter.jobdir import layout, private
from tenter.runtime.mpi_shim import GIVEN_ENV, PLAN_ENV, RANK_LOGS_ENV, RANK_WATCH_ENV
from tenter.spec import lookup
from tenter.spec.catalog import InstanceType
from tenter.spec.mpi_options import MpiOptions

MPIRUN = "mpirun"
SHIM_MODULE = "tenter.runtime.mpi_shim"


def mca_defaults(nic: str) -> dict[str, str]:
    """The MCA parameters SageMaker's toolkit sets (sagemaker_training/mpi.py), as data."""
    return {
        # TCP traffic (MPI's own and its out-of-band channel) only on the hosts' interface:
        # Docker bridges and other interfaces are unroutable between hosts.
        "btl_tcp_if_include": nic,
        "oob_tcp_if_include": nic,
        # ssh from the launcher to every host directly (hosts cannot ssh to each other).
        "plm_rsh_no_tree_spawn": "1",
        "pml": "ob1",
        "btl": "^openib",
        # One failing rank stops the job instead of leaving the others hanging.
        "orte_abort_on_non_zero_status": "1",
        # CMA (process_vm_readv) is not allowed in containers without SYS_PTRACE.
        "btl_vader_single_copy_mechanism": "none",
    }


FLAG_DEFAULTS: dict[str, tuple[str, ...]] = {
    # Lines arrive as [job,rank]<stream>: ... when a rank writes to mpirun's console.
    "--tag-output": (),
    # torch sets its own thread affinity; binding ranks to cores would pin a rank's
    # data-loader workers to one core.
    "--bind-to": ("none",),
    # Fill each host's slots in order: rank i*P+j is on host i.
    "--map-by": ("slot",),
}
"""mpirun's own flags: flag -> its values. A flag in custom_mpi_options replaces ours."""

_FLAG_ALIASES = {"-bind-to": "--bind-to", "-map-by": "--map-by", "-tag-output": "--tag-output"}

FORWARDED_ENV: tuple[tuple[str, Callable[[InstanceType], bool]], ...] = (
    ("PATH", lambda t: True),
    # CUDA, NCCL and EFA libraries are found through it on GPU hosts.
    ("LD_LIBRARY_PATH", lambda t: t.gpus > 0),
)
"""The launcher's variables forwarded to remote hosts (``-x NAME``, no value)."""


def default_options(itype: InstanceType, nic: str) -> MpiOptions:
    """tenter's defaults for an instance type: MCA parameters and ``-x`` variables."""
    env: dict[str, str | None] = {name: None for name, needed in FORWARDED_ENV if needed(itype)}
    env.update(fabric_env(itype, nic))
    return MpiOptions(mca=mca_defaults(nic), env=env)


def _flags(user_other: Sequence[str]) -> list[str]:
    """Our mpirun flags, less those the user gives, then the user's."""
    given = {_FLAG_ALIASES.get(token, token) for token in user_other}
    ours: list[str] = []
    for flag, values in FLAG_DEFAULTS.items():
        if flag not in given:
            ours += [flag, *values]
    return [*ours, *user_other]


def mpirun_argv(
    plan: Plan,
    hosts: Sequence[str],
    slots_per_host: int,
    python: str,
    *,
    user_options: MpiOptions,
    network_interface: str,
    master_port: str = MASTER_PORT,
    master_addr: str | None = None,
    host_slots: int | None = None,
    hostfile: str | None = None,
    allow_run_as_root: bool = False,
    agent_store: bool = False,
    rank_logs: bool = False,
    plan_source: str,
) -> list[str]:
    """The mpirun argv that runs ``plan``: host ``i`` of the plan on ``hosts[i]``.

    ``master_port``: the placeholder ``${master_port}`` until the launcher picks the port.
    ``master_addr``: where the ranks find the store (default: the plan's ``MASTER_ADDR``,
    rank 0's host; isolated hosts reach the launcher's store on their switch).
    ``host_slots``: the slots each host offers (default ``slots_per_host``; simulated hosts
    that share this machine each name all of its slots).
    ``hostfile``: passed as ``--hostfile`` (slots come from it; each context still names its
    host). ``agent_store``: the launcher serves ``MASTER_ADDR:MASTER_PORT`` (torch elastic's
    agent store) instead of rank 0. ``rank_logs``: each rank writes ``logs/rank-N.*`` in the
    job directory (which must be on a shared file system) instead of mpirun's console, and,
    with a ``hang_timeout``, its progress record for the launcher's hang watch.
    ``plan_source``: where each rank's shim finds its environment (the job directory's
    ``plan.json``, or the ``http://`` address of a server of it), so the command line carries
    only the variables below, not every host's contract (which, naming every host, grows
    with the square of the hosts).
    """
    if len(hosts) != len(plan.hosts):
        raise ValueError(f"the plan has {len(plan.hosts)} hosts but {len(hosts)} were given")
    itype = lookup(plan.instance_type)
    assert itype is not None, "the spec check rejects unknown instance types"
    options = user_options.merged_over(default_options(itype, network_interface))
    argv = [MPIRUN]
    if allow_run_as_root:
        argv.append("--allow-run-as-root")
    argv += _flags(options.other)
    for name, value in options.mca.items():
        argv += ["--mca", name, value]
    if hostfile is not None:
        argv += ["--hostfile", hostfile]
    first = plan.hosts[0]
    job_env = {
        "MASTER_ADDR": master_addr or plan.process_env(first, first.ranks[0])["MASTER_ADDR"],
        "MASTER_PORT": master_port,
        "TORCHELASTIC_USE_AGENT_STORE": str(agent_store),
    }
    if rank_logs:
        job_env[RANK_LOGS_ENV] = str(layout.logs_dir(plan.job_dir))
        if plan.hang_timeout:  # the launcher's hang watch reads the ranks' progress records
            job_env[RANK_WATCH_ENV] = "1"
    # The user's -x replaces the contract's value as well as tenter's defaults; tenter's
    # defaults with a value are the plan's already.
    given: dict[str, str | None] = {
        k: v
        for k, v in {**job_env, **options.env}.items()
        if v is None or k in job_env or k in user_options.env
    }
    # Secrets pass by name: mpirun forwards its own environment's value, never on a command line.
    secrets: dict[str, str | None] = dict.fromkeys(plan.secrets)
    if plan_source.startswith("http://"):  # the server of the ranks' environments asks for it
        secrets[private.TOKEN_ENV] = None
    env = {**given, **secrets, PLAN_ENV: plan_source, GIVEN_ENV: ",".join(given)}
    for target in hosts:
        argv += ["-np", str(slots_per_host)]
        argv += ["--host", target if hostfile else f"{target}:{host_slots or slots_per_host}"]
        for name, env_value in env.items():
            argv += ["-x", name if env_value is None else f"{name}={env_value}"]
        argv += [python, "-m", SHIM_MODULE, *plan.command, ":"]
    return argv[:-1]
