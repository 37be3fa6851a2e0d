"""The plan: for every host and every rank, the exact command, directory and environment.

:func:`make_plan` is a pure function of the spec (plus the job id and the Python to use), so
``tenter plan`` can print it and tests can pin it. The backends that run tenter's per-host agent
(local, Slurm) or mpirun execute this same object: each agent reads its :class:`HostPlan` from
``plan.json``.

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
import functools
import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from tenter.contract import isolation, sagemaker, torchrun, worker
from tenter.contract.fabric import LOOPBACK_NIC
from tenter.contract.placeholders import (
    HOST,
    HOST_ADDR,
    HOST_DIR,
    HOST_INDEX,
    LIGHTHOUSE_PORT,
    MASTER_PORT,
    RDZV_PORT,
    resolve,
)
from tenter.jobdir import layout
from tenter.spec import InstanceType, JobSpec, lookup, processes_per_host
from tenter.spec.catalog import detect_local
from tenter.spec.gpus import GPU_INSTANCE_TYPE, GpuPlacement, cpu_note, place_gpus
from tenter.spec.limits import MAX_SIMULATED_HOSTS
from tenter.spec.validate import planned_hosts


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
    env: dict[str, str] = field(default_factory=dict)
    """The environment every process of every host shares, with the host placeholders
    (``${host}``, ``${host_index}``, ``${host_addr}``, ``${host_dir}``) where a value names
    its host."""
    common_rank_env: dict[str, str] = field(default_factory=dict)
    """torch's variables equal on every rank (``WORLD_SIZE``, ``MASTER_ADDR``...); each
    :class:`RankPlan` holds the rest."""
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
        """Where a worker's logs go: ``logs/rank-N`` for the planned first attempt, and a
        name with host and attempt for any other (a restart must not overwrite the output of
        earlier attempts; after a membership change a rank number may move to another host)."""
        planned = any(r.rank == rank for h in self.hosts if h.name == host for r in h.ranks)
        logs = layout.logs_dir(self.job_dir)
        if attempt or not planned:
            return layout.rank_log_stem(logs, rank, host, attempt)
        return layout.rank_log_stem(logs, rank)

    def host_env(self, host: HostPlan) -> dict[str, str]:
        """Every process of ``host`` gets this environment (and its rank's variables)."""
        values = host_values(host)
        return {**{k: resolve(v, values) for k, v in self.env.items()}, **host.env}

    def process_env(self, host: HostPlan, rank: RankPlan) -> dict[str, str]:
        """Everything the worker of ``rank`` gets beyond the launcher's own environment: the
        shared environment, its host's, its rank's. Every backend composes it here."""
        return {**self.host_env(host), **self.common_rank_env, **rank.env}

    def host_tree(self, host: HostPlan) -> HostPlan:
        """``host`` with its whole environment and every file it writes under its ``dir``."""
        values = host_values(host)
        shared = {k: resolve(v, values) for k, v in self.host_files.items()}
        return dataclasses.replace(host, env=self.host_env(host), files={**shared, **host.files})

    def to_json(self) -> str:
        """The plan as compact JSON (a plan of 1,024 hosts is megabytes: indenting it would
        add a third, and take json's slow path)."""
        return json.dumps(self, default=vars)

    def resolved(self, values: Mapping[str, object]) -> Plan:
        """This plan with the placeholders that ``values`` names filled in, everywhere (see
        :mod:`tenter.contract.placeholders`)."""
        escaped = {name: json.dumps(str(value))[1:-1] for name, value in values.items()}
        return Plan.from_json(resolve(self.to_json(), escaped))

    @classmethod
    def from_json(cls, text: str) -> Plan:
        data = json.loads(text)

        def hosts(key: str) -> list[HostPlan]:
            return [
                HostPlan(**{**h, "ranks": [RankPlan(**r) for r in h["ranks"]]}) for h in data[key]
            ]

        return cls(**{**data, "hosts": hosts("hosts"), "spare_hosts": hosts("spare_hosts")})


def host_values(host: HostPlan) -> dict[str, str]:
    """The host placeholders' values on ``host``."""
    return {HOST: host.name, HOST_INDEX: str(host.index), HOST_ADDR: host.addr, HOST_DIR: host.dir}


def _own(
    shared: Mapping[str, str], values: Mapping[str, str], full: Mapping[str, str]
) -> dict[str, str]:
    """What of ``full`` (a host's environment or files) the ``shared`` one, filled in with
    the host's ``values``, does not already say."""
    filled = {k: resolve(v, values) for k, v in shared.items()}
    assert filled.keys() <= full.keys(), "every host has every shared variable"
    return {k: v for k, v in full.items() if filled.get(k) != v}


def new_job_id(name: str) -> str:
    """``<name>-<UTC timestamp>-<4 hex>``: unique, sortable, readable."""
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(2)}"


def jobs_root(spec: JobSpec, tenter_home: Path) -> Path:
    return Path(spec.output_dir) if spec.output_dir else tenter_home / "jobs"


def simulated_host_addr(index: int) -> str:
    """Loopback address of simulated host ``index`` (0-based): 127.100.0.1, 127.101.0.1, ...

    torch elastic's c10d rendezvous ranks nodes by sorting their address strings; three-digit
    second octets make string order equal host order, for up to 156 hosts (the spec's limit,
    :data:`tenter.spec.limits.MAX_SIMULATED_HOSTS`, refuses more before anything is planned).
    """
    assert 0 <= index < MAX_SIMULATED_HOSTS, "the spec check bounds the simulated hosts"
    return f"127.{100 + index}.0.1"


def make_plan(
    spec: JobSpec,
    job_id: str,
    tenter_home: Path,
    python: str,
    *,
    addrs: list[str] | None = None,
    network_interface: str = LOOPBACK_NIC,
    gpus: GpuPlacement | None = None,
) -> Plan:
    """The plan of a validated, path-resolved spec.

    Cluster backends (mpirun, Slurm) pass the hosts' real ``addrs`` and ``network_interface``;
    by default the hosts are simulated on this machine's loopback interface, or with
    ``isolation: network`` on a private network (:mod:`tenter.contract.isolation`), and share
    its GPUs as ``gpus`` says (default: :func:`tenter.spec.gpus.place_gpus` over every host
    the job may have, its spares too)."""
    elastic = spec.elastic
    spare = range(spec.instance_count + 1, (elastic.max_hosts or 0) + 1) if addrs is None else ()
    itype = lookup(spec.instance_type)
    assert itype is not None, "the spec check rejects unknown instance types"
    procs = processes_per_host(spec, itype)
    job_dir = jobs_root(spec, tenter_home) / job_id
    names = sagemaker.host_names(spec.instance_count)
    simulated = addrs is None
    isolated = simulated and spec.isolation == "network"
    if simulated and gpus is None:
        gpus = place_gpus(
            detect_local().gpu_ids,
            planned_hosts(spec),
            procs,
            required=spec.instance_type == GPU_INSTANCE_TYPE,
        )
    if isolated:
        addrs = [isolation.host_addr(i) for i in range(spec.instance_count)]
        network_interface = isolation.HOST_NIC
    elif addrs is None:
        addrs = [simulated_host_addr(i) for i in range(spec.instance_count)]
    assert addrs is not None
    checkpoint_dir = spec.checkpoint.dir or str(job_dir / layout.CHECKPOINTS_DIR)
    ft = spec.fault_tolerance
    groups = ft.replica_groups if ft else 0
    per_group = spec.instance_count // groups if groups else spec.instance_count
    # The lighthouse listens where the launcher is: this machine's loopback for simulated
    # hosts, the isolated hosts' switch, the first host on a cluster.
    lighthouse_addr = isolation.SWITCH_ADDR if isolated else "127.0.0.1" if simulated else addrs[0]
    lighthouse = f"http://{lighthouse_addr}:{LIGHTHOUSE_PORT}" if ft else ""

    def placement(
        host: str, index: str, addr: str, host_dir: PurePath, group: int
    ) -> worker.Placement:
        return worker.Placement(
            job_id=job_id,
            job_dir=job_dir,
            host=host,
            host_index=index,
            host_addr=addr,
            hosts=names,
            host_dir=host_dir,
            network_interface=network_interface,
            module_dir=spec.source_dir,
            checkpoint_dir=checkpoint_dir,
            channels={ch: str(host_dir / "input" / "data" / ch) for ch in spec.channels},
            simulated=simulated,
            pin_interface=isolated,
            cache_dir=tenter_home / "cache",
            replica_group=group if ft else None,
            lighthouse=lighthouse,
        )

    def config_files(host: str) -> dict[str, str]:
        config = {
            "resourceconfig.json": sagemaker.resource_config(
                host, names, itype.sagemaker_name, network_interface
            ),
            "hyperparameters.json": sagemaker.hyperparameters_json(spec.hyperparameters),
            "inputdataconfig.json": sagemaker.input_data_config(spec.channels),
        }
        return {f"input/config/{f}": json.dumps(content, indent=2) for f, content in config.items()}

    # What every host shares, once, naming its host by the host placeholders; each host
    # keeps what differs. Spelled out per host (quadratic: every host's SageMaker variables
    # list all hosts) only where hosts may differ beyond their names: the first (SageMaker's
    # master), simulated hosts (their shares of the machine's GPUs; at most
    # MAX_SIMULATED_HOSTS), and all of them if the second shows a difference the
    # placeholders cannot carry (a job directory whose name JSON escapes).
    shared_env = worker.host_env(
        spec, itype, procs, placement(HOST, HOST_INDEX, HOST_ADDR, PurePath(HOST_DIR), 0)
    )
    shared_files = config_files(HOST)
    spell_out = simulated or gpus is not None

    def whole_env(index: int) -> dict[str, str]:
        host_dir = job_dir / layout.HOSTS_DIR / names[index]
        where = placement(names[index], str(index), addrs[index], host_dir, index // per_group)
        env = worker.host_env(spec, _host_type(itype, gpus, index), procs, where)
        return _with_gpus(env, gpus, index)

    spelled = {index: whole_env(index) for index in range(len(names))} if spell_out else {}
    # A simulated host without GPUs lacks a GPU host's variables: shared is what all have.
    for env in spelled.values():
        shared_env = {k: v for k, v in shared_env.items() if k in env}
    logs_dir = str(layout.logs_dir(job_dir))
    hosts = []
    for index, (name, addr) in enumerate(zip(names, addrs, strict=True)):
        group, group_index = divmod(index, per_group)
        host_dir = job_dir / layout.HOSTS_DIR / name
        values = {HOST: name, HOST_INDEX: str(index), HOST_ADDR: addr, HOST_DIR: str(host_dir)}
        own_env = {"REPLICA_GROUP_ID": str(group)} if ft and group else {}
        own_files: dict[str, str] = {}
        if spell_out or index < 2:
            full_env = spelled[index] if index in spelled else whole_env(index)
            exact_env = _own(shared_env, values, full_env)
            exact_files = _own(shared_files, values, config_files(name))
            spell_out = spell_out or (index == 1 and (exact_env, exact_files) != (own_env, {}))
            own_env, own_files = exact_env, exact_files
        ranks = []
        for local_rank in range(procs):
            rank = index * procs + local_rank
            log = layout.rank_log_stem(logs_dir, rank)  # a str join: 8,192 ranks at 1,024 hosts
            ranks.append(
                RankPlan(
                    rank=rank,
                    local_rank=local_rank,
                    # In a replica group, torch's variables count within the group.
                    env={
                        **torchrun.torchrun_env(
                            rank=group_index * procs + local_rank,
                            local_rank=local_rank,
                            group_rank=group_index,
                            local_world_size=procs,
                            num_hosts=per_group,
                            master_addr=addrs[group * per_group],
                            master_port=MASTER_PORT,
                            run_id=f"{job_id}-group-{group}" if ft else job_id,
                            max_restarts=elastic.max_restarts,
                        ),
                        "TORCHELASTIC_ERROR_FILE": layout.error_file(log),
                    },
                    stdout=layout.stdout_file(log),
                    stderr=layout.stderr_file(log),
                    error_file=layout.error_file(log),
                )
            )
        hosts.append(
            HostPlan(
                name=name,
                index=index,
                addr=addr,
                dir=str(host_dir),
                env=own_env,
                files=own_files,
                links={
                    **{f"input/data/{ch}": path for ch, path in spec.channels.items()},
                    # SageMaker's /opt/ml/checkpoints, shared by all hosts of the job.
                    "checkpoints": checkpoint_dir,
                },
                ranks=ranks,
                replica_group=group,
                gpus=None if gpus is None or not gpus.machine_gpus else list(gpus.hosts[index]),
            )
        )
    # torch's variables equal on every rank (WORLD_SIZE, MASTER_ADDR...) are kept once too
    # (taken out of the ranks' dicts in place: nothing has seen them yet).
    envs = [rank.env for host in hosts for rank in host.ranks]
    common = dict(functools.reduce(lambda a, b: a & b.items(), envs[1:], set(envs[0].items())))
    for env in envs:
        for name in common:
            del env[name]
    store_addr = isolation.SWITCH_ADDR if isolated else "127.0.0.1"
    first_host_store = _store_on_first_host(spec, isolated, per_group)
    return Plan(
        job_id=job_id,
        job_dir=str(job_dir),
        backend=spec.backend,
        command=worker.worker_argv(spec, python, spec.source_dir),
        cwd=spec.source_dir,
        hosts=hosts,
        procs_per_host=procs,
        rdzv_endpoint=elastic.rendezvous.endpoint
        or f"{addrs[0] if first_host_store else store_addr}:{RDZV_PORT}",
        store_on_first_host=first_host_store,
        instance_type=spec.instance_type,
        spare_hosts=[
            _spare_host(
                spec,
                job_id,
                tenter_home,
                python,
                count,
                procs,
                gpus,
                shared_env,
                shared_files,
                common,
            )
            for count in spare
        ],
        checkpoint_dir=checkpoint_dir,
        # torch's name for the etcd backend of its dynamic rendezvous (the one that orders
        # hosts by address, as c10d does).
        rdzv_backend="etcd-v2" if elastic.rendezvous.backend == "etcd" else "c10d",
        min_hosts=elastic.min_hosts or per_group,
        max_hosts=elastic.max_hosts or per_group,
        join_timeout=elastic.rendezvous.join_timeout,
        last_call_timeout=elastic.rendezvous.last_call_timeout,
        max_restarts=elastic.max_restarts,
        hang_timeout=elastic.hang_timeout,
        on_hang=elastic.on_hang,
        max_run=spec.max_run,
        preemption_grace=spec.checkpoint.preemption_grace,
        stragglers=spec.stragglers.model_dump(exclude={"enabled"})
        if spec.stragglers.enabled
        else {},
        replica_groups=groups,
        min_replicas=ft.min_replicas if ft else 0,
        lighthouse=lighthouse,
        isolation="network" if isolated else "none",
        gpu_note=cpu_note(gpus.machine_gpus, len(gpus.hosts), procs)
        if gpus is not None and gpus.without_gpus
        else "",
        env=shared_env,
        host_files=shared_files,
        common_rank_env=common,
    )


def _host_type(itype: InstanceType, gpus: GpuPlacement | None, host: int) -> InstanceType:
    """What a simulated host of a ``local`` type has: its share of the machine's GPUs (what
    ``SM_NUM_GPUS`` says); a catalog type keeps the catalog's (a rehearsal of that type)."""
    if gpus is None or not gpus.machine_gpus or not itype.is_local:
        return itype
    return dataclasses.replace(itype, gpus=len(gpus.hosts[host]), gpu_ids=gpus.hosts[host])


def _with_gpus(env: dict[str, str], gpus: GpuPlacement | None, host: int) -> dict[str, str]:
    """The host's environment with its GPUs; a ``CUDA_VISIBLE_DEVICES`` of the spec's own
    ``environment`` stands."""
    visible = gpus.visible_devices(host) if gpus is not None else None
    if visible is None or "CUDA_VISIBLE_DEVICES" in env:
        return env
    return {**env, "CUDA_VISIBLE_DEVICES": visible}


def _spare_host(
    spec: JobSpec,
    job_id: str,
    tenter_home: Path,
    python: str,
    count: int,
    procs: int,
    gpus: GpuPlacement | None,
    shared_env: Mapping[str, str],
    shared_files: Mapping[str, str],
    common_rank_env: Mapping[str, str],
) -> HostPlan:
    """Host ``count`` of the job, as it is when it joins the ``count - 1`` before it (on
    the GPUs planned for it with the others), beyond what the job's hosts share."""
    grown = spec.model_copy(
        update={
            "instance_count": count,
            # the job's, which a default (a share of the GPUs) would count on fewer hosts
            "processes_per_host": procs,
            "elastic": spec.elastic.model_copy(update={"max_hosts": None}),
        }
    )
    alone = make_plan(grown, job_id, tenter_home, python, gpus=gpus)
    host = alone.hosts[-1]
    values = host_values(host)
    whole = alone.host_tree(host)
    filled = {k: resolve(v, values) for k, v in shared_env.items()}
    own_env = {k: v for k, v in whole.env.items() if filled.get(k) != v}
    base = {**filled, **own_env, **common_rank_env}
    ranks = []
    for rank in host.ranks:
        env = alone.process_env(host, rank)
        assert base.keys() <= env.keys(), "every rank has every shared variable"
        ranks.append(dataclasses.replace(rank, env=_own(base, {}, env)))
    return dataclasses.replace(
        whole, env=own_env, files=_own(shared_files, values, whole.files), ranks=ranks
    )


def _store_on_first_host(spec: JobSpec, isolated: bool, per_group: int) -> bool:
    """:attr:`Plan.store_on_first_host` for a local job: one of fixed membership on c10d,
    on this machine's network (isolated hosts reach the launcher's store on their switch),
    without replica groups (a group may end while the others go on)."""
    elastic = spec.elastic
    fixed = (elastic.min_hosts or per_group) == (elastic.max_hosts or per_group)
    c10d = elastic.rendezvous.backend != "etcd"
    return spec.backend == "local" and fixed and c10d and not isolated and not spec.fault_tolerance
