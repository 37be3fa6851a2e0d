"""A SageMaker user's first day (issue 39, items 3 and 4): the SDK guide's launcher and training
script, unchanged but for the import, get the arguments and ``SM_*`` variables that SageMaker's
own training toolkit makes of the same job (``sagemaker-training`` 5.1.4, a dev dependency: its
``Environment`` reads the host's ``/opt/ml`` tree that tenter wrote, and its ``to_cmd_args`` and
``to_env_vars`` give what its container would pass); the estimator's lifecycle is the SDK's (a
stopped job's ``wait()`` warns and returns); on isolated hosts a script with hard-coded
``/opt/ml`` paths runs."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tenter import Estimator as PyTorch
from tenter.contract.plan import Plan
from tenter.estimator import STOPPED_WARNING
from tests.conftest import (
    assert_network_gone,
    assert_nothing_left,
    job_processes,
    own_children,
    tenter,
)
from tests.estimator.test_fit import run_the_guides_estimator

pytestmark = pytest.mark.slow

GUIDE = Path(__file__).parents[1] / "estimator" / "scripts"
"""The SDK guide's training script (pytorch-train.py) and a script that waits for a file."""
SCRIPTS = Path(__file__).parent / "scripts"

TOOLKIT = """
import json, sys
from sagemaker_training import environment

hyperparameters = {**environment.read_hyperparameters(), **json.loads(sys.argv[2])}
env = environment.Environment(hyperparameters=hyperparameters)
with open(sys.argv[1], "w") as f:
    json.dump({"argv": env.to_cmd_args(), "env": env.to_env_vars()}, f)
"""
"""What SageMaker's container makes of a host's /opt/ml tree (run in a process of its own: the
toolkit reads its base directory once, at import)."""

MEASURED = {"SM_NUM_CPUS", "SM_NUM_GPUS", "SM_NUM_NEURONS"}
"""The toolkit counts the machine's; tenter gives the instance type's (docs/estimator.md)."""


def toolkit_view(tmp_path: Path, job_dir: Path, host: str) -> dict[str, Any]:
    """The toolkit's arguments and variables for ``host`` of the job, given what the SDK adds
    to the hyperparameters it sends (the entry point, its folder, the log level, the job name
    and, for a job without ``distribution``, these flags off)."""
    plan = Plan.from_json((job_dir / "plan.json").read_text())
    env = plan.host_env(next(h for h in plan.hosts if h.name == host))
    sdk = {
        "sagemaker_program": env["SM_USER_ENTRY_POINT"],
        "sagemaker_submit_directory": env["SM_MODULE_DIR"],
        "sagemaker_container_log_level": 20,
        "sagemaker_job_name": plan.job_id,
        "sagemaker_region": "us-west-2",
        **{
            f"sagemaker_{flag}_enabled": False
            for flag in ("distributed_dataparallel", "mpi", "torch_distributed", "modelparallel")
        },
    }
    out = tmp_path / f"toolkit-{host}.json"
    subprocess.run(
        [sys.executable, "-c", TOOLKIT, str(out), json.dumps(sdk)],
        env={
            **os.environ,
            "SAGEMAKER_BASE_DIR": str(job_dir / "hosts" / host),
            "TRAINING_JOB_NAME": plan.job_id,
        },
        capture_output=True,
        check=True,
        timeout=120,
    )
    view: dict[str, Any] = json.loads(out.read_text())
    return view


def sm_variables(env: dict[str, str]) -> dict[str, Any]:
    """The ``SM_*`` variables, ``SM_TRAINING_ENV`` decoded, less the counts of the machine."""
    out: dict[str, Any] = {k: v for k, v in env.items() if k.startswith("SM_")}
    for name in MEASURED:
        out.pop(name, None)
    training_env = json.loads(out.pop("SM_TRAINING_ENV"))
    out["SM_TRAINING_ENV"] = {k: training_env[k] for k in TRAINING_ENV_KEYS if k in training_env}
    return out


TRAINING_ENV_KEYS = [
    "additional_framework_parameters",
    "channel_input_dirs",
    "current_host",
    "current_instance_group",
    "current_instance_group_hosts",
    "current_instance_type",
    "distribution_hosts",
    "distribution_instance_groups",
    "framework_module",
    "hosts",
    "hyperparameters",
    "input_config_dir",
    "input_data_config",
    "input_dir",
    "instance_groups",
    "instance_groups_dict",
    "is_hetero",
    "is_master",
    "job_name",
    "log_level",
    "master_hostname",
    "model_dir",
    "module_dir",
    "module_name",
    "network_interface_name",
    "output_data_dir",
    "output_dir",
    "output_intermediate_dir",
    "resource_config",
    "user_entry_point",
]
"""``SM_TRAINING_ENV``'s keys that tenter sets (the toolkit adds its own state: whether
smddprun is installed, the S3 output location...)."""


def test_the_guides_job_gets_the_toolkits_arguments_and_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytorch_estimator = run_the_guides_estimator(tmp_path, monkeypatch)
    job_dir = Path(pytorch_estimator.latest_training_job.job_dir)  # type: ignore[union-attr]
    plan = Plan.from_json((job_dir / "plan.json").read_text())
    toolkit = toolkit_view(tmp_path, job_dir, "algo-1")
    # The plan is what ran (tests/launch/test_plan_is_what_runs.py): the script's arguments
    # after its path, and its host's variables.
    script = plan.command.index(str(GUIDE / "pytorch-train.py"))
    assert plan.command[script + 1 :] == toolkit["argv"]
    assert toolkit["argv"] == ["--batch-size", "64", "--epochs", "20", "--learning-rate", "0.1"]
    assert sm_variables(plan.host_env(plan.hosts[0])) == sm_variables(toolkit["env"])
    assert_nothing_left(job_dir)


def test_lists_dicts_nulls_and_one_letter_names_arrive_as_the_toolkit_passes_them(
    tmp_path: Path,
) -> None:
    hyperparameters = {
        "layers": [1, "a"],
        "optimizer": {"name": "adam", "betas": [0.9, 0.99]},
        "v": True,
        "warmup": None,
        "note": "it's $(here)",
        "lr": 1e-05,
    }
    estimator = PyTorch("sees.py", source_dir=str(SCRIPTS), instance_count=2,
                        hyperparameters=hyperparameters)  # fmt: skip
    estimator.fit()

    job_dir = Path(estimator.latest_training_job.job_dir)  # type: ignore[union-attr]
    for host in ("algo-1", "algo-2"):
        seen = json.loads((job_dir / "hosts" / host / "output/data/sees.json").read_text())
        toolkit = toolkit_view(tmp_path, job_dir, host)
        assert seen["argv"] == toolkit["argv"]
        assert sm_variables(seen["env"]) == sm_variables(toolkit["env"])
    assert seen["argv"] == [
        "--layers", "[1, 'a']",
        "--lr", "1e-05",
        "--note", "it's $(here)",
        "--optimizer", "betas=[0.9, 0.99],name=adam",
        "-v", "True",
        "--warmup", "",
    ]  # fmt: skip
    assert seen["env"]["SM_HP_LAYERS"] == '[1,"a"]'
    assert_nothing_left(job_dir)


def test_a_stopped_job_waits_with_a_warning_and_describes_itself_as_the_sdk(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    estimator = PyTorch("gate.py", source_dir=str(GUIDE), max_run=180,
                        environment={"GATE_FILE": str(tmp_path / "never")},
                        hyperparameters={"epochs": 3})  # fmt: skip
    estimator.fit(wait=False)
    job = estimator.latest_training_job
    assert job is not None
    running = job.describe()
    assert (running["TrainingJobStatus"], running["SecondaryStatus"]) == ("InProgress", "Training")
    assert running["HyperParameters"] == {"epochs": "3"}
    assert running["StoppingCondition"] == {"MaxRuntimeInSeconds": 180}
    assert "FailureReason" not in running and "TrainingEndTime" not in running

    job.stop()
    assert job.describe()["TrainingJobStatus"] in ("Stopping", "Stopped")
    with caplog.at_level(logging.WARNING, logger="tenter.estimator"):
        result = job.wait(logs="None")  # the SDK's follow-up code, after a stop
    assert STOPPED_WARNING in caplog.messages
    assert result.state == "interrupted"
    assert capsys.readouterr().out == ""  # logs="None": neither the ranks' output nor a summary
    stopped = job.describe()
    assert (stopped["TrainingJobStatus"], stopped["SecondaryStatus"]) == ("Stopped", "Stopped")
    assert "FailureReason" not in stopped
    assert stopped["TrainingEndTime"] >= stopped["TrainingStartTime"]
    # Stopped at once, before its rendezvous: no endpoint for assert_nothing_left to check.
    assert job_processes(job.name) == [] and own_children() == []


def test_isolated_hosts_see_their_tree_at_opt_ml() -> None:
    assert not Path("/opt/ml").exists()  # else the test proves nothing
    done = tenter("run", "--hosts", "2", "--isolation", "network",
                  "--source-dir", str(SCRIPTS), "hard_coded.py")  # fmt: skip
    assert done.returncode == 0, done.stderr
    for host in ("algo-1", "algo-2"):
        assert (done.job_dir / "hosts" / host / "model/host.txt").read_text() == f"{host} {host}"
    assert not Path("/opt/ml").exists()
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(done.job_dir) not in mounts and "tenter-opt" not in mounts
    assert_network_gone(done.job_dir)
    assert_nothing_left(done.job_dir)
