"""The hosts of a plan: each host's placement, its SageMaker files and environment, and the
split of what every host shares (kept once, with the host placeholders) from what is its own."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePath

from tenter.contract import sagemaker, worker
from tenter.contract.placeholders import (
    HOST,
    HOST_ADDR,
    HOST_DIR,
    HOST_INDEX,
    resolve,
)
from tenter.contract.plan import HostPlan, RankPlan
from tenter.contract.planner.addresses import Addresses
from tenter.jobdir import layout
from tenter.spec import InstanceType, JobSpec
from tenter.spec.gpus import GpuPlacement


@dataclass(frozen=True)
class Placements:
    """What the placements of a job's hosts share (:class:`worker.Placement`): :meth:`of`
    makes one host's."""

    spec: JobSpec
    job_id: str
    job_dir: Path
    tenter_home: Path
    names: list[str]
    where: Addresses
    checkpoint_dir: str
    lighthouse: str
    machine: InstanceType | None
    """This machine, where the hosts are simulated on it."""
    gpus: GpuPlacement | None

    def host_dir(self, index: int) -> Path:
        return self.job_dir / layout.HOSTS_DIR / self.names[index]

    def share(self, index: int) -> worker.HostShare | None:
        if self.machine is None:
            return None
        assert self.gpus is not None, "simulated hosts have their GPUs placed"
        cpus = max(1, self.machine.cpus // len(self.names))
        return worker.HostShare(len(self.gpus.hosts[index]), cpus)

    def of(
        self, host: str, index: str, addr: str, host_dir: PurePath, group: int, share_of: int
    ) -> worker.Placement:
        """Host ``host`` (placeholders or its own names) with the share of host ``share_of``."""
        spec = self.spec
        return worker.Placement(
            job_id=self.job_id,
            job_dir=self.job_dir,
            host=host,
            host_index=index,
            host_addr=addr,
            hosts=self.names,
            host_dir=host_dir,
            network_interface=self.where.network_interface,
            module_dir=spec.source_dir,
            checkpoint_dir=self.checkpoint_dir,
            channels={ch: str(host_dir / "input" / "data" / ch) for ch in spec.channels},
            share=self.share(share_of),
            pin_interface=self.where.isolated,
            cache_dir=self.tenter_home / "cache",
            replica_group=group if spec.fault_tolerance else None,
            lighthouse=self.lighthouse,
        )


def config_files(
    spec: JobSpec, itype: InstanceType, names: list[str], nic: str, host: str
) -> dict[str, str]:
    """SageMaker's ``input/config/*.json`` of ``host`` (a name or the ``${host}`` placeholder)."""
    config = {
        "resourceconfig.json": sagemaker.resource_config(host, names, itype.sagemaker_name, nic),
        "hyperparameters.json": sagemaker.hyperparameters_json(spec.hyperparameters),
        "inputdataconfig.json": sagemaker.input_data_config(spec.channels),
    }
    return {f"input/config/{f}": json.dumps(content, indent=2) for f, content in config.items()}


def whole_host_env(
    place: Placements, itype: InstanceType, procs: int, per_group: int, index: int
) -> dict[str, str]:
    """Host ``index``'s whole environment, spelled out (every host listing every host)."""
    where = place.of(
        place.names[index],
        str(index),
        place.where.addrs[index],
        place.host_dir(index),
        index // per_group,
        index,
    )
    env = worker.host_env(place.spec, _host_type(itype, place.gpus, index), procs, where)
    return _with_gpus(env, place.gpus, index)


@dataclass(frozen=True)
class SharedAndOwn:
    """The hosts' environments and files: what all share, with the host placeholders, once;
    what each has of its own."""

    env: dict[str, str]
    files: dict[str, str]
    own: list[tuple[dict[str, str], dict[str, str]]]
    """Per host, its own environment and files."""


def shared_and_own(
    place: Placements, itype: InstanceType, procs: int, per_group: int
) -> SharedAndOwn:
    """What every host shares, once, naming its host by the host placeholders; each host
    keeps what differs. Spelled out per host (quadratic: every host's SageMaker variables
    list all hosts) only where hosts may differ beyond their names: the first (SageMaker's
    master), simulated hosts (their shares of the machine's GPUs; at most
    MAX_SIMULATED_HOSTS), and all of them if the second shows a difference the
    placeholders cannot carry (a job directory whose name JSON escapes)."""
    spec, names, nic = place.spec, place.names, place.where.network_interface
    generic = place.of(HOST, HOST_INDEX, HOST_ADDR, PurePath(HOST_DIR), 0, 0)
    shared_env = worker.host_env(spec, itype, procs, generic)
    shared_files = config_files(spec, itype, names, nic, HOST)
    spell_out = place.where.simulated or place.gpus is not None
    spelled = {}
    if spell_out:
        spelled = {i: whole_host_env(place, itype, procs, per_group, i) for i in range(len(names))}
    # A simulated host without GPUs lacks a GPU host's variables: shared is what all have.
    for env in spelled.values():
        shared_env = {k: v for k, v in shared_env.items() if k in env}
    own = []
    for index, (name, addr) in enumerate(zip(names, place.where.addrs, strict=True)):
        group = index // per_group
        own_env = {"REPLICA_GROUP_ID": str(group)} if spec.fault_tolerance and group else {}
        own_files: dict[str, str] = {}
        if spell_out or index < 2:
            values = {HOST: name, HOST_INDEX: str(index), HOST_ADDR: addr}
            values[HOST_DIR] = str(place.host_dir(index))
            full_env = spelled.get(index) or whole_host_env(place, itype, procs, per_group, index)
            exact_env = own_part(shared_env, values, full_env)
            exact_files = own_part(
                shared_files, values, config_files(spec, itype, names, nic, name)
            )
            spell_out = spell_out or (index == 1 and (exact_env, exact_files) != (own_env, {}))
            own_env, own_files = exact_env, exact_files
        own.append((own_env, own_files))
    return SharedAndOwn(shared_env, shared_files, own)


def host_plan(
    place: Placements,
    index: int,
    own: tuple[dict[str, str], dict[str, str]],
    per_group: int,
    ranks: list[RankPlan],
) -> HostPlan:
    """Host ``index`` of the job: its own environment and files, links and ranks."""
    gpus = place.gpus
    return HostPlan(
        name=place.names[index],
        index=index,
        addr=place.where.addrs[index],
        dir=str(place.host_dir(index)),
        env=own[0],
        files=own[1],
        links={
            **{f"input/data/{ch}": path for ch, path in place.spec.channels.items()},
            # SageMaker's /opt/ml/checkpoints, shared by all hosts of the job.
            "checkpoints": place.checkpoint_dir,
        },
        ranks=ranks,
        replica_group=index // per_group,
        gpus=None if gpus is None or not gpus.machine_gpus else list(gpus.hosts[index]),
    )


def own_part(
    shared: Mapping[str, str], values: Mapping[str, str], full: Mapping[str, str]
) -> dict[str, str]:
    """What of ``full`` (a host's environment or files) the ``shared`` one, filled in with
    the host's ``values``, does not already say."""
    filled = {k: resolve(v, values) for k, v in shared.items()}
    assert filled.keys() <= full.keys(), "every host has every shared variable"
    return {k: v for k, v in full.items() if filled.get(k) != v}


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
