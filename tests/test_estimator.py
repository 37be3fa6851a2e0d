"""The SageMaker-style front end: same arguments, a blocking fit, an error on failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tenter import Estimator, JobFailedError
from tests.conftest import SCRIPTS, assert_nothing_left


@pytest.mark.slow
def test_fit_runs_the_job_with_its_channels_and_hyperparameters() -> None:
    est = Estimator(
        entry_point="contract.py",
        source_dir=str(SCRIPTS),
        instance_count=2,
        instance_type="local",
        hyperparameters={"epochs": 3},
        distribution={"torch_distributed": {"enabled": True}},
    )
    est.fit({"training": str(SCRIPTS)})
    job_dir = Path(est.latest_job.job_dir)
    seen = json.loads((job_dir / "hosts/algo-2/output/data/rank-1.json").read_text())
    assert seen["argv"] == ["--epochs", "3"]
    assert seen["env"]["SM_CHANNEL_TRAINING"] == str(job_dir / "hosts/algo-2/input/data/training")
    assert est.model_data == str(job_dir / "hosts/algo-1/model")
    assert_nothing_left(job_dir)


@pytest.mark.slow
def test_fit_raises_with_the_root_cause_if_the_job_fails() -> None:
    est = Estimator(
        entry_point="fail.py",
        source_dir=str(SCRIPTS),
        instance_count=2,
        processes_per_host=2,
        environment={"FAIL_MODE": "raise"},
    )
    with pytest.raises(JobFailedError, match="root cause: rank 3 on host algo-2") as info:
        est.fit()
    assert "ValueError: boom at step 3" in str(info.value)
    assert info.value.result.exit_code == 1


def test_unknown_arguments_are_errors_and_aws_only_ones_warnings() -> None:
    with pytest.raises(
        TypeError, match=r"unexpected argument 'instance_cont'\. Did you mean 'instance_count'\?"
    ):
        Estimator(entry_point="contract.py", source_dir=str(SCRIPTS), instance_cont=2)
    with pytest.warns(UserWarning, match="ignored by tenter .*: framework_version, role"):
        Estimator(
            entry_point="contract.py",
            source_dir=str(SCRIPTS),
            role="arn:x",
            framework_version="2.3",
        )
