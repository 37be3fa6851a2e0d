"""Building the plan (:mod:`tenter.contract.plan`): :func:`make_plan`, a pure function of the
validated spec, the job id, tenter's home and the Python to use, and the job ids and
simulated hosts' addresses it names. Kept apart from the plan's types, which every backend and
agent reads, while only ``tenter plan``/``run`` (and a Slurm node's entry, resolving its
part) build one."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import re
import secrets
import time
from collections.abc import Mapping
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
from tenter.contract.plan import HostPlan, Plan, RankPlan, host_values
from tenter.jobdir import layout
from tenter.spec import InstanceType, JobSpec, lookup, processes_per_host
from tenter.spec.catalog import detect_local
from tenter.spec.gpus import GPU_INSTANCE_TYPE, GpuPlacement, cpu_note, place_gpus
from tenter.spec.limits import MAX_SIMULATED_HOSTS
from tenter.spec.validate import planned_hosts


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


def job_identity(spec: JobSpec) -> str:
    """What makes two runs the same job, so that the second resumes the first: its name and
    what it runs (the working directory and the script, module or command), as
    ``<name>-<entry>-<8 hex>``. Neither the hosts, the hyperparameters nor the script's
    arguments take part: a job resumed on fewer hosts, or with a changed learning rate, is
    the same job (SageMaker's anchor: one ``checkpoint_s3_uri`` for every run of a job)."""
    what = [spec.source_dir, spec.entry_point, spec.module, spec.command]
    digest = hashlib.sha256(json.dumps(what).encode()).hexdigest()[:8]
    # The script's or program's own name: train.py -> train, pkg.train -> pkg-train.
    entry = (worker.entry_name(spec).split() or [""])[0].rsplit("/", 1)[-1].removesuffix(".py")
    slug = re.sub(r"[^A-Za-z0-9]+", "-", entry).strip("-")[:40]
    return "-".join(part for part in (spec.name, slug, digest) if part)


def default_checkpoint_dir(spec: JobSpec, tenter_home: Path) -> Path:
    """``checkpoint.dir`` when the spec gives none: beside the job directories, one folder per
    job identity (:func:`job_identity`), so that running the same job again resumes it."""
    return jobs_root(spec, tenter_home) / layout.CHECKPOINTS_DIR / job_identity(spec)


def simulated_host_addr(index: int) -> str:
    """Loopback address of simulated host ``index`` (0-based): 127.100.0.1, 127.101.0.1, ...

    torch elastic's c10d rendezvous ranks nodes by sorting their address strings; three-digit
    second octets make string order equal host order, for up to 156 hosts (the spec's limit,
    :data:`tenter.spec.limits.MAX_SIMULATED_HOSTS`, refuses more before anything is planned).
    """
    assert index >= 0
    if index < MAX_SIMULATED_HOSTS:
        return f"127.{100 + index}.0.1"
    # Beyond the spec's limit only in a rehearsal (tenter.rehearsal.plan), whose membership
    # is fixed: its rounds are planned, not ordered by torch's rendezvous.
    return f"127.{100 + index % MAX_SIMULATED_HOSTS}.{index // MAX_SIMULATED_HOSTS}.1"


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
    machine = detect_local() if simulated else None
    if machine is not None and gpus is None:
        gpus = place_gpus(
            machine.gpu_ids,
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
    checkpoint_dir = spec.checkpoint.dir or str(default_checkpoint_dir(spec, tenter_home))
    ft = spec.fault_tolerance
    groups = ft.replica_groups if ft else 0
    per_group = spec.instance_count // groups if groups else spec.instance_count
    # The lighthouse listens where the launcher is: this machine's loopback for simulated
    # hosts, the isolated hosts' switch, the first host on a cluster.
    lighthouse_addr = isolation.SWITCH_ADDR if isolated else "127.0.0.1" if simulated else addrs[0]
    lighthouse = f"http://{lighthouse_addr}:{LIGHTHOUSE_PORT}" if ft else ""

    def share(index: int) -> worker.HostShare | None:
        if machine is None:
            return None
        assert gpus is not None, "simulated hosts have their GPUs placed"
        return worker.HostShare(len(gpus.hosts[index]), max(1, machine.cpus // len(names)))

    def placement(
        host: str, index: str, addr: str, host_dir: PurePath, group: int, of: int
    ) -> worker.Placement:
        """Host ``host`` (placeholders or its own names) with the share of host ``of``."""
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
            share=share(of),
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
        spec, itype, procs, placement(HOST, HOST_INDEX, HOST_ADDR, PurePath(HOST_DIR), 0, 0)
    )
    shared_files = config_files(HOST)
    spell_out = simulated or gpus is not None

    def whole_env(index: int) -> dict[str, str]:
        host_dir = job_dir / layout.HOSTS_DIR / names[index]
        where = placement(
            names[index], str(index), addrs[index], host_dir, index // per_group, index
        )
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
    """What a simulated host of a ``local`` type has: its share of the machine's GPUs (its
    NCCL variables follow them); a catalog type keeps the catalog's fabric (a rehearsal of that
    type), while its ``SM_NUM_GPUS`` says the share too (:class:`worker.HostShare`)."""
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
