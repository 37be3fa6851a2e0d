"""The plan of a spec, composed of the named steps of this package."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tenter.contract import sagemaker, worker
from tenter.contract.fabric import LOOPBACK_NIC
from tenter.contract.placeholders import (
    resolve,
)
from tenter.contract.plan import HostPlan, Plan, host_values
from tenter.contract.planner.addresses import host_addresses, lighthouse_url, store_policy
from tenter.contract.planner.hosts import (
    Placements,
    SharedAndOwn,
    host_plan,
    own_part,
    shared_and_own,
)
from tenter.contract.planner.identity import default_checkpoint_dir, jobs_root
from tenter.contract.planner.ranks import common_rank_env, host_ranks, without
from tenter.spec import JobSpec, lookup, processes_per_host
from tenter.spec.catalog import detect_local
from tenter.spec.gpus import GPU_INSTANCE_TYPE, GpuPlacement, cpu_note, place_gpus
from tenter.spec.validate import planned_hosts

ETCD_V2_HELP = (
    "check that etcd is reachable there and serves the v2 API "
    "(etcd <= 3.5 started with --enable-v2; etcd 3.6 removed it)"
)


def job_policy(spec: JobSpec, per_group: int) -> dict[str, Any]:
    """The plan's fields that the spec alone gives: rendezvous, restarts, hangs, limits."""
    elastic, ft = spec.elastic, spec.fault_tolerance
    stragglers = spec.stragglers
    min_hosts, max_hosts = elastic.min_hosts or per_group, elastic.max_hosts or per_group
    # The local and Ray launchers declare lost hosts (an agent or a node gone), and preempt
    # the job themselves: a SIGTERM to their agents is their "stop now", not a scheduler's.
    launcher_watches_hosts = spec.backend in ("local", "ray")
    etcd = elastic.rendezvous.backend == "etcd"
    return {
        # torch's name for the etcd backend of its dynamic rendezvous (the one that orders
        # hosts by address, as c10d does).
        "rdzv_backend": "etcd-v2" if etcd else "c10d",
        "serves_store": not etcd,
        "planned_first_round": not etcd and min_hosts == max_hosts,
        "rdzv_help": ETCD_V2_HELP if etcd else "",
        "min_hosts": min_hosts,
        "max_hosts": max_hosts,
        "restart_in_round": min_hosts == max_hosts or launcher_watches_hosts,
        "sigterm_preempts": not launcher_watches_hosts,
        # tenter's agents start the workers from the submitting shell's environment; mpirun's
        # remote ranks and the pods get what the plan passes (-x, the manifest) only.
        "pass_environment": "all" if spec.backend in ("local", "slurm") else "none",
        "join_timeout": elastic.rendezvous.join_timeout,
        "last_call_timeout": elastic.rendezvous.last_call_timeout,
        "max_restarts": elastic.max_restarts,
        "hang_timeout": elastic.hang_timeout,
        "on_hang": elastic.on_hang,
        "max_run": spec.max_run,
        "preemption_grace": spec.checkpoint.preemption_grace,
        "stragglers": stragglers.model_dump(exclude={"enabled"}) if stragglers.enabled else {},
        "replica_groups": ft.replica_groups if ft else 0,
        "min_replicas": ft.min_replicas if ft else 0,
    }


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
    itype = lookup(spec.instance_type)
    assert itype is not None, "the spec check rejects unknown instance types"
    procs = processes_per_host(spec, itype)
    where = host_addresses(spec, addrs, network_interface)
    machine = detect_local() if where.simulated else None
    if machine is not None and gpus is None:
        required = spec.instance_type == GPU_INSTANCE_TYPE
        gpus = place_gpus(machine.gpu_ids, planned_hosts(spec), procs, required=required)
    ft = spec.fault_tolerance
    per_group = spec.instance_count // ft.replica_groups if ft else spec.instance_count
    place = Placements(
        spec=spec,
        job_id=job_id,
        job_dir=jobs_root(spec, tenter_home) / job_id,
        tenter_home=tenter_home,
        names=sagemaker.host_names(spec.instance_count),
        where=where,
        checkpoint_dir=spec.checkpoint.dir or str(default_checkpoint_dir(spec, tenter_home)),
        lighthouse=lighthouse_url(spec, where),
        machine=machine,
        gpus=gpus,
    )
    parts = shared_and_own(place, itype, procs, per_group)
    ranks = [host_ranks(place, procs, per_group, i) for i in range(len(place.names))]
    common = common_rank_env([rank for host in ranks for rank in host])
    endpoint, on_first_host = store_policy(spec, where, per_group)
    spare = range(spec.instance_count + 1, (spec.elastic.max_hosts or 0) + 1)
    return Plan(
        job_id=job_id,
        job_dir=str(place.job_dir),
        backend=spec.backend,
        command=worker.worker_argv(spec, python, spec.source_dir),
        cwd=spec.source_dir,
        hosts=[
            host_plan(place, i, parts.own[i], per_group, without(ranks[i], common))
            for i in range(len(place.names))
        ],
        procs_per_host=procs,
        rdzv_endpoint=endpoint,
        store_on_first_host=on_first_host,
        instance_type=spec.instance_type,
        spare_hosts=[
            _spare_host(spec, job_id, tenter_home, python, count, procs, gpus, parts, common)
            for count in (spare if where.simulated else ())
        ],
        checkpoint_dir=place.checkpoint_dir,
        lighthouse=place.lighthouse,
        isolation="network" if where.isolated else "none",
        gpu_note=cpu_note(gpus.machine_gpus, len(gpus.hosts), procs)
        if gpus is not None and gpus.without_gpus
        else "",
        env=parts.env,
        secrets=list(spec.secrets),
        output_group=spec.output_group or "",
        host_files=parts.files,
        common_rank_env=common,
        **job_policy(spec, per_group),
    )


def _spare_host(
    spec: JobSpec,
    job_id: str,
    tenter_home: Path,
    python: str,
    count: int,
    procs: int,
    gpus: GpuPlacement | None,
    shared: SharedAndOwn,
    common: Mapping[str, str],
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
    filled = {k: resolve(v, values) for k, v in shared.env.items()}
    own_env = {k: v for k, v in whole.env.items() if filled.get(k) != v}
    base = {**filled, **own_env, **common}
    ranks = []
    for rank in host.ranks:
        env = alone.process_env(host, rank)
        assert base.keys() <= env.keys(), "every rank has every shared variable"
        ranks.append(dataclasses.replace(rank, env=own_part(base, {}, env)))
    return dataclasses.replace(
        whole, env=own_env, files=own_part(shared.files, values, whole.files), ranks=ranks
    )
