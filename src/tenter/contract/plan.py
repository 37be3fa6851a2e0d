"""The plan: for every host and every rank, the exact command, directory and environment.

:func:`tenter.contract.planner.make_plan` is a pure function of the spec (plus the job id
and the Python to use), so ``tenter plan`` can print it and tests can pin it. The backends
that run tenter's per-host agent (local, Slurm) or mpirun execute this same object: each
agent reads its :class:`HostPlan` from ``plan.json`` (written once, at launch; the hosts that
join later are in the job's membership record: :func:`read_plan` reads both).

What every host shares is kept once (:attr:`Plan.env`, :attr:`Plan.host_files`, written with
the host placeholders ``${host}``, ``${host_dir}``...); a :class:`HostPlan` holds only what
differs on its host, and a :class:`RankPlan` its rank's torchrun variables. So the plan grows
with the hosts, not their square (every host's ``SM_HOSTS`` names them all), and
:meth:`Plan.process_env` is the one function that composes a process's environment on every
backend.

What cannot be known before launch (free ports the launcher picks, Slurm's nodes) appears as
a named placeholder, filled in by :meth:`Plan.resolved` (:mod:`tenter.contract.placeholders`).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tenter.contract.placeholders import (
    HOST,
    HOST_ADDR,
    HOST_DIR,
    HOST_INDEX,
    MASTER_PORT,
    resolve,
)
from tenter.contract.torchrun import torchrun_env
from tenter.jobdir import layout, membership


@dataclass(frozen=True)
class RankPlan:
    rank: int
    local_rank: int
    env: dict[str, str]
    """The torchrun variables of this rank, on top of its host's environment (those equal on
    every rank are in :attr:`Plan.env`)."""
    stdout: str
    stderr: str
    error_file: str
    """Where the worker's uncaught exception is written (torch elastic's error file)."""


@dataclass(frozen=True)
class HostPlan:
    name: str
    index: int
    addr: str
    """The host's address. Simulated hosts each get their own loopback address (isolated
    hosts: :func:`tenter.contract.isolation.host_addr`), ordered so that torch elastic's
    rendezvous gives host i the group rank i, as a job's planned first round does."""
    dir: str
    """The host's SageMaker ``/opt/ml`` directory."""
    env: dict[str, str]
    """What this host's environment has beyond (or instead of) the plan's shared one
    (:meth:`Plan.host_env` composes the two)."""
    files: dict[str, str]
    """Files to write under ``dir`` beyond the plan's ``host_files``: relative path -> content."""
    links: dict[str, str]
    """Symlinks to create under ``dir``: relative path -> target (input channels)."""
    ranks: list[RankPlan]
    replica_group: int = 0
    """The torchft replica group of the host (``fault_tolerance``; else 0)."""
    gpus: list[str] | None = None
    """The GPUs of this simulated host (its ``CUDA_VISIBLE_DEVICES``; empty: none, its ranks
    run on the CPU); None: the host's own (a cluster's hosts, a machine without GPUs)."""


@dataclass(frozen=True)
class Plan:
    job_id: str
    job_dir: str
    backend: str
    command: list[str]
    """The same for every rank: the per-rank differences are all in the environment."""
    cwd: str
    hosts: list[HostPlan]
    procs_per_host: int
    rdzv_endpoint: str
    instance_type: str
    checkpoint_dir: str = ""
    rdzv_backend: str = "c10d"
    serves_store: bool = True
    """tenter serves the rendezvous' c10d store (the launcher, or the first host's agent:
    ``store_on_first_host``); False: the store is another's (etcd's) at ``rdzv_endpoint``."""
    planned_first_round: bool = True
    """The first round needs no rendezvous round of torch's: fixed membership on a store tenter
    serves (:func:`tenter.launch.agent.rendezvous.join_planned`)."""
    rdzv_help: str = ""
    """What to check when the rendezvous fails, beyond its endpoint and cause."""
    store_on_first_host: bool = False
    """The first host's agent serves the job's c10d store at the rendezvous endpoint, its own
    address (:mod:`tenter.launch.agent.job_store`): a local job of fixed membership, which ends
    with any of its hosts (its launcher then imports no torch), and a Slurm job's first node
    (no launcher outlives the nodes). Otherwise the launcher serves it, or it is etcd's."""
    min_hosts: int = 1
    max_hosts: int = 1
    join_timeout: int = 600
    last_call_timeout: int = 30
    keep_alive_s: int = 5
    """Rendezvous heartbeat interval; a host missing 3 in a row is dropped from the next round."""
    max_restarts: int = 0
    hang_timeout: int | None = None
    on_hang: str = "stop"
    max_run: int | None = None
    preemption_grace: int = 30
    """Seconds a preempted job gets for its final checkpoint (the spec's checkpoint field)."""
    restart_in_round: bool = False
    """Agents restart within the round (a gone host is known at once: fixed membership, or
    the local launcher, which declares lost hosts; :mod:`tenter.launch.agent.in_round`)."""
    sigterm_preempts: bool = False
    """A SIGTERM to an agent is a scheduler's preemption (Slurm's): ``preemption_grace`` to end."""
    stragglers: dict[str, float] = field(default_factory=dict)
    """The straggler rule (window, windows, ratio, min_excess_s); empty: no detection."""
    launcher: list[str] = field(default_factory=list)
    """What starts the job on a cluster backend: the mpirun or sbatch argv (empty on the local
    backend, which starts one agent per host itself)."""
    files: dict[str, str] = field(default_factory=dict)
    """Files a cluster backend writes into ``job_dir`` before ``launcher`` runs: path -> text."""
    spare_hosts: list[HostPlan] = field(default_factory=list)
    """Hosts an elastic job may add up to ``max_hosts`` (``tenter join``), planned now so that
    what joins is what ``tenter plan`` showed."""
    replica_groups: int = 0
    """torchft replica groups (``fault_tolerance``): the hosts, in order, split into this many
    equal groups, each its own rendezvous with its own restarts; 0: one world, no torchft."""
    min_replicas: int = 0
    lighthouse: str = ""
    """Where torchft's lighthouse listens (``http://ADDR:${lighthouse_port}``): the launcher
    binds ADDR, the job's address, never all interfaces."""
    lighthouse_heartbeat_ms: int = 5000
    """A replica group silent this long is out of the next quorum (torchft's default)."""
    isolation: str = "none"
    """``network``: the launcher runs each host in namespaces of its own
    (:mod:`tenter.contract.isolation`); ``none``: on this machine's network."""
    gpu_note: str = ""
    """What the launcher says once when the machine's GPUs are too few for one per rank and
    the ranks run without them (:func:`tenter.spec.gpus.cpu_note`)."""
    pass_environment: str = "all"
    """What of the submitting shell's environment reaches the workers, under the plan's own:
    ``all`` (torchrun's and Slurm's ``--export=ALL``: users' own variables reach their ranks;
    the local and Slurm backends) or ``none`` (mpirun's remote ranks and Kubernetes' pods get
    the plan's variables only). :func:`tenter.contract.torchrun.shared_worker_env` applies it."""
    env: dict[str, str] = field(default_factory=dict)
    """The environment every process of every host shares, with the host placeholders
    (``${host}``, ``${host_index}``, ``${host_addr}``, ``${host_dir}``) where a value names
    its host."""
    common_rank_env: dict[str, str] = field(default_factory=dict)
    """torch's variables equal on every rank (``WORLD_SIZE``, ``MASTER_ADDR``...); each
    :class:`RankPlan` holds the rest."""
    output_group: str = ""
    """The group that reads the job directory too (:mod:`tenter.jobdir.private`)."""
    secrets: list[str] = field(default_factory=list)
    """Variables every process takes from the launcher's environment: names, never values."""
    host_files: dict[str, str] = field(default_factory=dict)
    """Files every host writes under its ``dir`` (host placeholders filled in as in ``env``)."""

    @property
    def world_size(self) -> int:
        return self.procs_per_host * len(self.hosts)

    @property
    def plan(self) -> Plan:
        """As a backend's request (:class:`tenter.launch.api.Request`), a plan is its own."""
        return self

    def write(self, folder: Path) -> list[Path]:
        """``tenter plan --out``: the plan as the job directory keeps it, in ``folder``."""
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / layout.PLAN_FILE
        path.write_text(self.to_json())
        return [path]

    @property
    def hosts_per_group(self) -> int:
        """Hosts in one rendezvous: a replica group's, or the whole job's."""
        return len(self.hosts) // self.replica_groups if self.replica_groups else len(self.hosts)

    def run_id(self, host: HostPlan) -> str:
        """The rendezvous the host joins: its replica group's, or the job's."""
        return f"{self.job_id}-group-{host.replica_group}" if self.replica_groups else self.job_id

    def job_rank(self, host: HostPlan, rank: int) -> int:
        """The job-wide rank of torch's ``RANK`` on ``host``: in a replica group torch counts
        within the group, and the job-wide rank (the group's first rank plus it) names the
        rank's files, console lines and failures, so that groups never share one."""
        return host.replica_group * self.hosts_per_group * self.procs_per_host + rank

    def log_stem(self, host: str, rank: int, attempt: int) -> str:
        """Where a worker's logs go (:func:`tenter.jobdir.layout.worker_log_stem`)."""
        planned = rank in self.planned_ranks_of(host)
        return layout.worker_log_stem(self.job_dir, rank, host, attempt, planned=planned)

    def planned_ranks_of(self, host: str) -> frozenset[int]:
        """The job-wide ranks the plan gives the host named ``host``."""
        return frozenset(r.rank for h in self.hosts if h.name == host for r in h.ranks)

    def host_env(self, host: HostPlan) -> dict[str, str]:
        """Every process of ``host`` gets this environment (and its rank's variables)."""
        values = host_values(host)
        return {**{k: resolve(v, values) for k, v in self.env.items()}, **host.env}

    def process_env(self, host: HostPlan, rank: RankPlan) -> dict[str, str]:
        """Everything the worker of ``rank`` gets beyond the submitting shell's environment
        (what ``pass_environment`` passes on): the shared environment, its host's, its rank's.
        Every backend composes it here."""
        return {**self.host_env(host), **self.common_rank_env, **rank.env}

    def host_tree(self, host: HostPlan) -> HostPlan:
        """``host`` with its whole environment and every file it writes under its ``dir``."""
        values = host_values(host)
        shared = {k: resolve(v, values) for k, v in self.host_files.items()}
        return dataclasses.replace(host, env=self.host_env(host), files={**shared, **host.files})

    def to_json(self) -> str:
        """The plan as compact JSON (1,024 hosts' is megabytes: indenting would add a third).
        A host whose ranks are the planner's formula's (:func:`_planned_ranks`) has no ``ranks``
        in it: 8,192 ranks' paths and variables were 90 % of a 1,024-host plan.
        :meth:`from_json` restores them, so a backend reads every rank spelled out."""
        hosts = [_compact(self, host) for host in self.hosts]
        return json.dumps({**vars(self), "hosts": hosts}, default=vars)

    def resolved(self, values: Mapping[str, object]) -> Plan:
        """This plan with the placeholders that ``values`` names filled in, everywhere (see
        :mod:`tenter.contract.placeholders`)."""
        escaped = {name: json.dumps(str(value))[1:-1] for name, value in values.items()}
        return Plan.from_json(resolve(self.to_json(), escaped))

    @classmethod
    def from_json(cls, text: str) -> Plan:
        """The plan :meth:`to_json` wrote, each host's ranks spelled out again."""
        return _from_data(json.loads(text))

    def with_joined(self, names: Collection[str]) -> Plan:
        """This plan with the spare hosts named in ``names`` among its hosts (they joined)."""
        joined = [h for h in self.spare_hosts if h.name in names]
        if not joined:
            return self
        spare = [h for h in self.spare_hosts if h.name not in names]
        return dataclasses.replace(self, hosts=[*self.hosts, *joined], spare_hosts=spare)

    def as_running(self) -> Plan:
        """This plan (as launched) with the hosts that have joined the job since."""
        return self.with_joined(membership.joined_hosts(self.job_dir))


def read_plan(job_dir: str | Path) -> Plan:
    """The plan of the job in ``job_dir`` as it runs now: ``plan.json``, written once at
    launch, with the hosts that joined since (:mod:`tenter.jobdir.membership`)."""
    return Plan.from_json((Path(job_dir) / layout.PLAN_FILE).read_text()).as_running()


def rank_plans(
    *,
    job_dir: str,
    first_rank: int,
    group_index: int,
    procs: int,
    per_group: int,
    master_addr: str,
    run_id: str,
    max_restarts: int,
) -> list[RankPlan]:
    """The ``procs`` ranks of one host, the first job-wide ``first_rank``, at ``group_index``
    in its rendezvous of ``per_group`` hosts: each rank's torchrun variables (which in a
    replica group count within the group) and its log files, named by its job-wide rank."""
    logs = str(layout.logs_dir(job_dir))  # joined as text: 8,192 ranks at 1,024 hosts
    ranks = []
    for local_rank in range(procs):
        log = layout.rank_log_stem(logs, first_rank + local_rank)
        env = torchrun_env(
            rank=group_index * procs + local_rank,
            local_rank=local_rank,
            group_rank=group_index,
            local_world_size=procs,
            num_hosts=per_group,
            master_addr=master_addr,
            master_port=MASTER_PORT,
            run_id=run_id,
            max_restarts=max_restarts,
        )
        ranks.append(
            RankPlan(
                rank=first_rank + local_rank,
                local_rank=local_rank,
                env={**env, "TORCHELASTIC_ERROR_FILE": layout.error_file(log)},
                stdout=layout.stdout_file(log),
                stderr=layout.stderr_file(log),
                error_file=layout.error_file(log),
            )
        )
    return ranks


def host_values(host: HostPlan) -> dict[str, str]:
    """The host placeholders' values on ``host``."""
    return {HOST: host.name, HOST_INDEX: str(host.index), HOST_ADDR: host.addr, HOST_DIR: host.dir}


def _planned_ranks(plan: Plan, host: HostPlan) -> list[RankPlan]:
    """The ranks of ``host`` as :func:`rank_plans` makes them, less :attr:`common_rank_env`:
    what ``plan.json`` leaves out of a host whose ranks are these (:meth:`Plan.from_json`)."""
    group_index = host.index - host.replica_group * plan.hosts_per_group
    first = host.replica_group * plan.hosts_per_group
    ranks = rank_plans(
        job_dir=plan.job_dir,
        first_rank=plan.job_rank(host, group_index * plan.procs_per_host),
        group_index=group_index,
        procs=plan.procs_per_host,
        per_group=plan.hosts_per_group,
        master_addr=plan.hosts[first].addr if first < len(plan.hosts) else "",
        run_id=plan.run_id(host),
        max_restarts=plan.max_restarts,
    )
    for rank in ranks:
        for name in plan.common_rank_env:
            rank.env.pop(name, None)
    return ranks


def _compact(plan: Plan, host: HostPlan) -> dict[str, object]:
    if host.ranks != _planned_ranks(plan, host):
        return vars(host)
    return {k: v for k, v in vars(host).items() if k != "ranks"}


def _from_data(data: dict[str, Any]) -> Plan:
    def hosts(key: str) -> list[HostPlan]:
        return [
            HostPlan(**{**h, "ranks": [RankPlan(**r) for r in h.get("ranks", [])]})
            for h in data[key]
        ]

    plan = Plan(**{**data, "hosts": hosts("hosts"), "spare_hosts": hosts("spare_hosts")})
    left_out = [i for i, h in enumerate(data["hosts"]) if "ranks" not in h]
    if not left_out:
        return plan
    full = list(plan.hosts)
    for i in left_out:
        full[i] = dataclasses.replace(full[i], ranks=_planned_ranks(plan, full[i]))
    return dataclasses.replace(plan, hosts=full)
