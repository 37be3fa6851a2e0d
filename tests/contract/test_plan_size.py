"""The plan grows with the hosts, not their square: what every host shares is kept once.

At 1,024 ml.p5.48xlarge hosts x 8 processes (each host's SageMaker variables name all 1,024)
the plan every Slurm node reads stays under 1 MB (its ranks' paths and torch variables follow
from a formula and are not written out), mpirun's command line well under Linux's
ARG_MAX, a Kubernetes MPIJob a few KB, and each host's own part holds no host list. (The
seconds to plan are measured in benchmarks/plan_scaling.py.)
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tenter.contract.plan import Plan
from tenter.launch.api import get_backend
from tenter.spec import load
from tenter.spec.limits import MAX_SIMULATED_HOSTS
from tests.launch.kubernetes.k8s_specs import launcher_job

SCRIPTS = Path(__file__).parents[1] / "launch" / "scripts"
HOSTS = 1024
ARG_MAX = 2 * 1024 * 1024
JOBS = "/home/someone/.tenter/jobs"
"""Where a user's jobs are (every rank's log paths name it: the plan's size depends on it)."""
JOB_ID = "tenter-20261126-000000-abcd"


def dryrun(backend: str, hosts: int, **fields: Any) -> Any:
    spec, _ = load(
        {
            "entry_point": "contract.py",
            "source_dir": str(SCRIPTS),
            "instance_type": "ml.p5.48xlarge",
            "hosts": hosts,
            "processes_per_host": 8,
            "backend": backend,
            "output_dir": JOBS,
            **fields,
        },
        SCRIPTS,
    )
    return get_backend(backend).dryrun(spec, JOB_ID)


def host_part(host: Any) -> int:
    """The bytes of a host's own part of the plan, its ranks' aside."""
    return len(json.dumps({**vars(host), "ranks": []}, default=vars))


def test_slurm_plan_of_1024_hosts_is_under_1_mb_and_each_host_names_only_itself() -> None:
    plan: Plan = dryrun("slurm", HOSTS)
    assert len(plan.to_json()) <= 1_000_000
    assert max(host_part(h) for h in plan.hosts[1:]) < 1_000  # no host list in it
    # host 0 (SageMaker's master, is_master true) spells out its SM_TRAINING_ENV: once
    assert host_part(plan.hosts[0]) < 100_000
    for index in (0, 1, 700, HOSTS - 1):
        host = plan.hosts[index]
        env = plan.process_env(host, host.ranks[3])
        training = json.loads(env["SM_TRAINING_ENV"])
        assert (env["SM_CURRENT_HOST"], training["current_host"]) == (host.name, host.name)
        assert training["is_master"] is (index == 0)
        assert len(json.loads(env["SM_HOSTS"])) == HOSTS
        assert json.loads(env["SM_RESOURCE_CONFIG"])["current_host"] == host.name
        assert env["SM_MODEL_DIR"] == f"{host.dir}/model" == training["model_dir"]
        assert (env["TENTER_HOST_INDEX"], env["RANK"]) == (str(index), str(index * 8 + 3))
        assert env["WORLD_SIZE"] == str(HOSTS * 8)
        files = plan.host_tree(host).files
        assert json.loads(files["input/config/resourceconfig.json"])["current_host"] == host.name


@pytest.mark.parametrize("where", ["catalog", "hostfile"])
def test_mpirun_command_of_1024_hosts_is_well_under_arg_max(where: str, tmp_path: Path) -> None:
    fields: dict[str, Any] = {}
    if where == "hostfile":
        hostfile = tmp_path / "hostfile"
        hostfile.write_text("".join(f"node-{i} slots=8\n" for i in range(HOSTS)))
        fields = {"mpirun": {"hostfile": str(hostfile)}}
    plan: Plan = dryrun("mpi", HOSTS, **fields)
    assert sum(len(arg) + 1 for arg in plan.launcher) < ARG_MAX // 2
    # the plan every host's shims read, besides the command line it holds
    assert len(dataclasses.replace(plan, launcher=[]).to_json()) < 5_000_000


def test_kubernetes_manifests_of_1024_hosts_are_one_pod_template() -> None:
    request = dryrun("kubernetes", HOSTS, kubernetes={"image": "train:1.0"})
    assert len(str(request)) < 1_000_000


def test_an_mpijob_of_1024_hosts_carries_the_job_and_its_launcher_a_short_mpirun() -> None:
    request = dryrun(
        "kubernetes", HOSTS, distribution={"mpi": {"enabled": True}}, kubernetes={"image": "t:1"}
    )
    [mpijob] = request.materialize()
    assert len(str(request)) < 20_000  # the API server refuses objects over 1.5 MB
    job = launcher_job(mpijob)
    plan = job.plan(29500)
    argv = job.mpirun(plan, "10.0.0.7", 29500, "http://10.0.0.7:41000")
    assert sum(len(arg) + 1 for arg in argv) < ARG_MAX // 2
    assert argv.count("-np") == HOSTS
    assert len(plan.to_json()) < 5_000_000  # what the launcher holds to serve each rank


def test_local_plan_of_many_simulated_hosts_grows_linearly() -> None:
    """The local backend simulates at most MAX_SIMULATED_HOSTS hosts (156), and no more
    workers than this machine's memory holds (94 on the 2-core, 24 GiB CI machine): 64 x 1
    here. Each host is spelled out (their shares of the machine's GPUs may differ), and
    still no host list is in a host's own part."""
    assert MAX_SIMULATED_HOSTS >= 64
    fields = {"instance_type": "local", "processes_per_host": 1}
    plan: Plan = dryrun("local", 64, **fields)
    assert max(host_part(h) for h in plan.hosts[1:]) < 1_000
    small: Plan = dryrun("local", 8, **fields)
    assert len(plan.to_json()) / 64 < 2 * len(small.to_json()) / 8


def test_a_job_directory_json_escapes_is_spelled_out_per_host(tmp_path: Path) -> None:
    """A path the placeholders cannot carry into a JSON value (a quote, a non-ASCII letter)
    leaves every host's environment whole, and still exact."""
    out = tmp_path / 'caf\u00e9 "jobs"'
    plan: Plan = dryrun("slurm", 3, output_dir=str(out))
    host = plan.hosts[2]
    env = plan.host_env(host)
    assert json.loads(env["SM_TRAINING_ENV"])["model_dir"] == env["SM_MODEL_DIR"]
    assert env["SM_MODEL_DIR"] == f"{out}/{JOB_ID}/hosts/algo-3/model"
