"""Estimator takes the SageMaker SDK's PyTorch estimator arguments, by their SDK names.

The names are the SDK's own, recorded here as data (sagemaker 2.257.7, read from the
signatures of ``sagemaker.pytorch.estimator.PyTorch.__init__``, ``sagemaker.estimator.
Framework.__init__``, ``EstimatorBase.__init__`` and ``EstimatorBase.fit``), so the test
needs no AWS SDK.
"""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import pytest

from tenter import Estimator
from tenter.estimator import AWS_ONLY
from tests.conftest import SCRIPTS

SDK_VERSION = "2.257.7"
PYTORCH_INIT = (
    "entry_point",
    "framework_version",
    "py_version",
    "source_dir",
    "hyperparameters",
    "image_uri",
    "distribution",
    "compiler_config",
    "training_recipe",
    "recipe_overrides",
)
FRAMEWORK_INIT = (
    "entry_point",
    "source_dir",
    "hyperparameters",
    "container_log_level",
    "code_location",
    "image_uri",
    "dependencies",
    "enable_network_isolation",
    "git_config",
    "checkpoint_s3_uri",
    "checkpoint_local_path",
    "enable_sagemaker_metrics",
)
ESTIMATOR_BASE_INIT = (
    "role",
    "instance_count",
    "instance_type",
    "keep_alive_period_in_seconds",
    "volume_size",
    "volume_kms_key",
    "max_run",
    "input_mode",
    "output_path",
    "output_kms_key",
    "base_job_name",
    "sagemaker_session",
    "tags",
    "subnets",
    "security_group_ids",
    "model_uri",
    "model_channel_name",
    "metric_definitions",
    "encrypt_inter_container_traffic",
    "use_spot_instances",
    "max_wait",
    "checkpoint_s3_uri",
    "checkpoint_local_path",
    "rules",
    "debugger_hook_config",
    "tensorboard_output_config",
    "enable_sagemaker_metrics",
    "enable_network_isolation",
    "profiler_config",
    "disable_profiler",
    "environment",
    "max_retry_attempts",
    "source_dir",
    "git_config",
    "hyperparameters",
    "container_log_level",
    "code_location",
    "entry_point",
    "dependencies",
    "instance_groups",
    "training_repository_access_mode",
    "training_repository_credentials_provider_arn",
    "enable_infra_check",
    "container_entry_point",
    "container_arguments",
    "disable_output_compression",
    "enable_remote_debug",
    "enable_session_tag_chaining",
    "training_plan",
    "instance_placement_config",
)
FIT = ("inputs", "wait", "logs", "job_name", "experiment_config")

SDK_ARGUMENTS = sorted({*PYTORCH_INIT, *FRAMEWORK_INIT, *ESTIMATOR_BASE_INIT} - {"entry_point"})
LOCAL_VALUES = {
    "source_dir": str(SCRIPTS),
    "hyperparameters": {"epochs": 2},
    "distribution": {"torch_distributed": {"enabled": True}},
    "instance_count": 2,
    "instance_type": "local",
    "environment": {"A": "1"},
    "max_run": 60,
    "base_job_name": "sdk-job",
    "checkpoint_local_path": "checkpoints",
}
"""A value for each argument with a meaning on this machine; AWS-only ones get a string."""


def test_every_argument_after_entry_point_is_keyword_only() -> None:
    params = list(inspect.signature(Estimator).parameters.values())
    assert params[0].name == "entry_point"
    assert params[0].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    kinds = {p.kind for p in params[1:]}
    assert kinds == {inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD}


def test_a_second_positional_argument_is_a_type_error() -> None:
    # The SDK's second parameter is framework_version; tenter's was source_dir.
    with pytest.raises(TypeError, match="positional argument"):
        Estimator("contract.py", "2.5")  # type: ignore[misc]


def test_aws_only_arguments_are_exactly_the_sdk_arguments_without_a_local_meaning() -> None:
    assert set(SDK_ARGUMENTS) - set(LOCAL_VALUES) == AWS_ONLY


@pytest.mark.parametrize("name", SDK_ARGUMENTS)
def test_each_sdk_argument_is_accepted_by_keyword(name: str) -> None:
    value = LOCAL_VALUES.get(name, "value-from-a-sagemaker-script")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = Estimator(entry_point="contract.py", **{"source_dir": str(SCRIPTS), name: value})
    notes = [str(w.message) for w in caught]
    if name in LOCAL_VALUES:
        assert notes == []
    else:
        assert len(notes) == 1
        assert notes[0].startswith(f"ignored by tenter (they configure AWS): {name}")
    assert est.spec.entry_point == "contract.py"


def test_local_arguments_reach_the_spec(tmp_path: Path) -> None:
    est = Estimator(
        entry_point="contract.py",
        **{**LOCAL_VALUES, "checkpoint_local_path": str(tmp_path / "ckpt")},
    )
    spec = est.spec
    assert (spec.source_dir, spec.instance_count, spec.name) == (str(SCRIPTS), 2, "sdk-job")
    assert spec.hyperparameters == {"epochs": 2} and spec.environment == {"A": "1"}
    assert spec.distribution.torch_distributed.enabled and spec.max_run == 60
    assert spec.checkpoint.dir == str(tmp_path / "ckpt")


def test_a_local_way_is_named_for_ignored_arguments_that_have_one() -> None:
    with pytest.warns(UserWarning) as caught:
        Estimator(
            entry_point="contract.py",
            source_dir=str(SCRIPTS),
            dependencies=["lib"],
            role="arn:aws:iam::1:role/x",
        )
    assert str(caught[0].message) == (
        "ignored by tenter (they configure AWS): dependencies, role; "
        "dependencies: put those folders on PYTHONPATH with environment="
    )


def test_fit_takes_the_sdk_arguments_in_the_sdk_order() -> None:
    params = list(inspect.signature(Estimator.fit).parameters)
    assert tuple(params[1:]) == FIT
