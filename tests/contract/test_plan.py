"""The plan is a pure function of the spec: pinned here for a 2 x 2 job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tenter.contract.plan import Plan
from tenter.contract.planner import job_identity, make_plan, simulated_host_addr
from tenter.spec import JobSpec, load

HERE = Path(__file__).parents[1] / "launch"  # the launch tests' scripts/


def spec_2x2(**changes: Any) -> JobSpec:
    fields = {
        "name": "demo",
        "entry_point": "scripts/contract.py",
        "source_dir": str(HERE),
        "hosts": 2,
        "processes_per_host": 2,
        "hyperparameters": {"epochs": 3, "lr": 0.1, "verbose": True},
        "channels": {"training": str(HERE)},
        "environment": {"FOO": "bar"},
    }
    spec, _ = load({**fields, **changes}, HERE)
    return spec


def plan_2x2() -> Plan:
    return make_plan(spec_2x2(), "demo-1", Path("/home"), "/usr/bin/python3")


def test_a_jobs_identity_is_its_name_and_what_it_runs_not_its_size_or_arguments() -> None:
    same = job_identity(spec_2x2())
    assert same == "demo-contract-" + same.rsplit("-", 1)[1]
    for change in ({"hosts": 1}, {"hyperparameters": {"lr": 1}}, {"args": ["--seed", "2"]}):
        assert job_identity(spec_2x2(**change)) == same, change
    for change in (
        {"name": "other"},
        {"entry_point": "scripts/block.py"},
        {"source_dir": str(HERE / "scripts"), "entry_point": "contract.py"},
    ):
        assert job_identity(spec_2x2(**change)) != same, change


def test_plan_numbers_ranks_host_by_host() -> None:
    plan = plan_2x2()
    assert [(h.name, h.addr, [r.rank for r in h.ranks]) for h in plan.hosts] == [
        ("algo-1", "127.100.0.1", [0, 1]),
        ("algo-2", "127.101.0.1", [2, 3]),
    ]
    assert plan.world_size == 4
    assert plan.command == [
        "/usr/bin/python3",
        "-m",
        "tenter.runtime.bootstrap",
        str(HERE / "scripts/contract.py"),
        "--epochs",
        "3",
        "--lr",
        "0.1",
        "--verbose",
        "True",
    ]
    assert plan.cwd == str(HERE)


def test_plan_gives_each_rank_the_torchrun_environment() -> None:
    plan = plan_2x2()
    host = plan.hosts[1]
    env = plan.process_env(host, host.ranks[1])
    expected = {
        "RANK": "3",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1",
        "GROUP_WORLD_SIZE": "2",
        "ROLE_RANK": "3",
        "ROLE_NAME": "default",
        "ROLE_WORLD_SIZE": "4",
        "MASTER_ADDR": "127.100.0.1",
        "MASTER_PORT": "${master_port}",
        "TORCHELASTIC_RUN_ID": "demo-1",
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_USE_AGENT_STORE": "True",
        "TORCHELASTIC_ERROR_FILE": "/home/jobs/demo-1/logs/rank-3.error.json",
    }
    assert {k: env[k] for k in expected} == expected
    assert env["FOO"] == "bar"


def test_plan_gives_each_host_its_sagemaker_contract() -> None:
    plan = plan_2x2()
    host = plan.hosts[1]
    assert host.dir == "/home/jobs/demo-1/hosts/algo-2"
    env = plan.host_env(host)
    assert env["SM_CURRENT_HOST"] == "algo-2"
    assert json.loads(env["SM_HOSTS"]) == ["algo-1", "algo-2"]
    assert env["SM_CHANNEL_TRAINING"] == "/home/jobs/demo-1/hosts/algo-2/input/data/training"
    assert json.loads(env["SM_CHANNELS"]) == ["training"]
    assert env["SM_MODEL_DIR"] == "/home/jobs/demo-1/hosts/algo-2/model"
    assert env["SM_OUTPUT_DATA_DIR"] == "/home/jobs/demo-1/hosts/algo-2/output/data"
    assert json.loads(env["SM_HPS"]) == {"epochs": 3, "lr": 0.1, "verbose": True}
    assert env["SM_HP_EPOCHS"] == "3" and env["SM_HP_VERBOSE"] == "true"
    assert json.loads(env["SM_USER_ARGS"]) == ["--epochs", "3", "--lr", "0.1", "--verbose", "True"]
    assert env["SM_NUM_GPUS"] == "0"
    training_env = json.loads(env["SM_TRAINING_ENV"])
    assert training_env["current_host"] == "algo-2" and training_env["master_hostname"] == "algo-1"
    assert json.loads(plan.host_tree(host).files["input/config/resourceconfig.json"]) == {
        "current_host": "algo-2",
        "current_instance_type": "local",
        "current_group_name": "homogeneousCluster",
        "hosts": ["algo-1", "algo-2"],
        "instance_groups": [
            {
                "instance_group_name": "homogeneousCluster",
                "instance_type": "local",
                "hosts": ["algo-1", "algo-2"],
            }
        ],
        "network_interface_name": "lo",
    }
    assert json.loads(plan.host_tree(host).files["input/config/hyperparameters.json"]) == {
        "epochs": "3",
        "lr": "0.1",
        "verbose": "true",
    }
    # The job's checkpoints, beside its runs' directories: the next run of it resumes.
    job_checkpoints = f"/home/jobs/checkpoints/{job_identity(spec_2x2())}"
    assert host.links == {"input/data/training": str(HERE), "checkpoints": job_checkpoints}
    assert env["TENTER_CHECKPOINT_DIR"] == job_checkpoints


def test_plan_round_trips_through_json() -> None:
    plan = plan_2x2()
    assert Plan.from_json(plan.to_json()) == plan


def test_simulated_addresses_sort_as_strings_in_host_order() -> None:
    addrs = [simulated_host_addr(i) for i in range(156)]
    assert sorted(addrs) == addrs


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({}, None),  # tenter.init() picks gloo (+ NCCL for CUDA tensors)
        ({"distribution": {"smdistributed": {"dataparallel": {"enabled": True}}}}, "tenter"),
        ({"distribution": {"pytorchddp": {"enabled": True}}}, "tenter"),
        (
            {
                "distribution": {"pytorchddp": {"enabled": True}},
                "process_group_backend": "gloo",
            },
            "gloo",
        ),
        ({"process_group_backend": "tenter"}, "tenter"),
    ],
)
def test_plan_tells_workers_the_process_group_backend(
    fields: dict[str, Any], expected: str | None
) -> None:
    spec, _ = load({"entry_point": "scripts/contract.py", "source_dir": str(HERE), **fields}, HERE)
    plan = make_plan(spec, "pg-1", Path("/home"), "/usr/bin/python3")
    host = plan.hosts[0]
    assert plan.process_env(host, host.ranks[0]).get("TENTER_PG_BACKEND") == expected
