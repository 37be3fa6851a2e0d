"""One spec, four backends, the same workers: every worker of a job gets the same variables
with the same values whichever backend runs it, except those that say where it runs (hosts,
addresses, ports, interfaces, paths), which :data:`tenter.contract.worker.PLACEMENT` lists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tenter.contract.placeholders import SLURM_NIC
from tenter.contract.plan import Plan
from tenter.contract.worker import is_placement
from tenter.launch.api import get_backend
from tenter.runtime.mpi_shim import LAUNCH_ENV, PLAN_ENV, contract_env, rank_env
from tenter.spec import JobSpec, load

SCRIPTS = Path(__file__).parents[1] / "launch" / "scripts"
JOB_ID = "conformance-20261123-000000-abcd"
Env = dict[str, str]


def spec(backend: str) -> JobSpec:
    loaded, _ = load(
        {
            "entry_point": "contract.py",
            "source_dir": str(SCRIPTS),
            "instance_count": 2,
            "instance_type": "ml.p4d.24xlarge",
            "hyperparameters": {"epochs": 3, "lr": 0.1},
            "environment": {"NCCL_DEBUG": "INFO"},
            "distribution": {"torch_distributed": {"enabled": True}},
            "checkpoint": {"every": 10, "keep": 2},
            "backend": backend,
            "kubernetes": {"image": "train:1.0"},
        },
        SCRIPTS,
    )
    return loaded


def local_like(backend: str) -> dict[int, Env]:
    """rank -> environment, from a plan tenter's agents execute (local, Slurm)."""
    plan: Plan = get_backend(backend).dryrun(spec(backend), JOB_ID)
    return {r.rank: plan.process_env(h, r) for h in plan.hosts for r in h.ranks}


def under_mpirun(tmp_path: Path) -> dict[int, Env]:
    """rank -> environment, as mpirun's -x of each app context and the shim (reading the plan
    file the -x names) make it."""
    plan: Plan = get_backend("mpi").dryrun(spec("mpi"), JOB_ID)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(plan.to_json())
    world = plan.world_size
    contexts: list[Env] = [{}]
    argv = plan.launcher
    for i, arg in enumerate(argv):
        if arg == ":":
            contexts.append({})
        elif arg == "-x" and "=" in argv[i + 1]:  # -x NAME alone forwards the launcher's
            name, _, value = argv[i + 1].partition("=")
            contexts[-1][name] = str(plan_file) if name == PLAN_ENV else value
    out = {}
    for host, env in enumerate(contexts):
        for local in range(plan.procs_per_host):
            rank = host * plan.procs_per_host + local
            ompi = {"OMPI_COMM_WORLD_RANK": str(rank), "OMPI_COMM_WORLD_SIZE": str(world)}
            seen = {**env, **ompi}
            seen |= contract_env(seen)
            seen |= rank_env(seen)
            out[rank] = {k: v for k, v in seen.items() if k not in ompi and k not in LAUNCH_ENV}
    return out


def in_pods() -> Env:
    """The pod template's environment of a PyTorchJob (torchrun adds the rank variables)."""
    request: Any = get_backend("kubernetes").dryrun(spec("kubernetes"), JOB_ID)
    (obj,) = request.materialize()
    container = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    # Values are escaped for the kubelet ($$ stands for $).
    return {e["name"]: e["value"].replace("$$", "$") for e in container["env"] if "value" in e}


def what_it_does(env: Env) -> Env:
    return {k: v for k, v in env.items() if not is_placement(k)}


@pytest.mark.parametrize("backend", ["mpi", "slurm"])
def test_every_rank_gets_the_local_backends_variables(backend: str, tmp_path: Path) -> None:
    local = local_like("local")
    other = under_mpirun(tmp_path) if backend == "mpi" else local_like(backend)
    assert sorted(other) == sorted(local)
    for rank, env in local.items():
        assert what_it_does(other[rank]) == what_it_does(env), f"rank {rank}"


def test_every_pod_gets_the_local_backends_host_variables() -> None:
    local = local_like("local")[0]
    pods = in_pods()
    # torchrun sets these in the pod, per rank, from the operator's PET_* variables.
    per_rank = {
        k
        for k in local
        if k.startswith(("RANK", "LOCAL_", "WORLD_", "GROUP_", "ROLE_", "TORCHELASTIC_"))
        and k != "TORCHELASTIC_SIGNALS_TO_HANDLE"
    }
    expected = {k: v for k, v in what_it_does(local).items() if k not in per_rank}
    assert what_it_does(pods) == expected


def test_placement_variables_are_what_differs() -> None:
    """The exceptions are real: each backend does place the job differently."""
    local, slurm = local_like("local")[0], local_like("slurm")[0]
    assert local["MASTER_ADDR"] != slurm["MASTER_ADDR"]
    # Slurm's nodes learn theirs: the interface of their NodeAddr.
    assert local["NCCL_SOCKET_IFNAME"] == "lo" and slurm["NCCL_SOCKET_IFNAME"] == SLURM_NIC
    assert in_pods()["TENTER_CHECKPOINT_DIR"] == "/opt/ml/checkpoints"
