"""The SageMaker training contract, per host: the ``/opt/ml`` layout under the host's directory
(``input/config/*.json``, ``input/data/<channel>``, ``model/``, ``output/``, ``checkpoints/``)
and the ``SM_*`` variables the sagemaker-training toolkit exports. Pure functions of the job.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import PurePath
from typing import Any

INSTANCE_GROUP = "homogeneousCluster"
"""SageMaker's name for the single instance group of a homogeneous cluster."""


def hyperparameter_args(hyperparameters: Mapping[str, Any]) -> list[str]:
    """The script's arguments, as sagemaker-training's ``mapping.to_cmd_args`` makes them from
    the hyperparameters the SDK sent: sorted by key, ``--key value`` (``-k`` for a one-letter
    key).

    Strings pass verbatim (a value with spaces, quotes or ``$(...)`` arrives unchanged: this
    is an argument list, never a shell string); a dict is ``k=v,k2=v2`` (sorted); ``null`` is
    an empty string; anything else is Python's ``str`` of the decoded JSON value (``True``,
    ``0.1``, ``[1, 'a']``), as the toolkit writes it.
    """
    args: list[str] = []
    for key in sorted(hyperparameters):
        args += [f"--{key}" if len(key) > 1 else f"-{key}", _arg_value(hyperparameters[key])]
    return args


def _arg_value(value: Any) -> str:
    if isinstance(value, Mapping):
        return ",".join(f"{k}={v}" for k, v in sorted(value.items()))
    return "" if value is None else str(value)


def env_value(value: Any) -> str:
    """A value as sagemaker-training's ``mapping.to_env_vars`` exports it: strings verbatim,
    ``null`` empty, anything else compact JSON with sorted keys."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def host_names(count: int) -> list[str]:
    """SageMaker's host names: ``algo-1``, ``algo-2``, ..."""
    return [f"algo-{i + 1}" for i in range(count)]


def resource_config(
    current_host: str, hosts: list[str], instance_type: str, network_interface: str
) -> dict[str, Any]:
    """The content of ``input/config/resourceconfig.json`` for ``current_host``."""
    return {
        "current_host": current_host,
        "current_instance_type": instance_type,
        "current_group_name": INSTANCE_GROUP,
        "hosts": hosts,
        "instance_groups": [
            {
                "instance_group_name": INSTANCE_GROUP,
                "instance_type": instance_type,
                "hosts": hosts,
            }
        ],
        "network_interface_name": network_interface,
    }


def input_data_config(channels: Mapping[str, str]) -> dict[str, Any]:
    """The content of ``input/config/inputdataconfig.json``: local channels are File mode."""
    return {
        name: {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated"}
        for name in sorted(channels)
    }


def hyperparameters_json(hyperparameters: Mapping[str, Any]) -> dict[str, str]:
    """``hyperparameters.json`` as SageMaker writes it: every value a JSON-encoded string."""
    return {k: json.dumps(v) for k, v in sorted(hyperparameters.items())}


def framework_params(distribution: Mapping[str, Any]) -> dict[str, Any]:
    """``SM_FRAMEWORK_PARAMS``: the ``sagemaker_*`` flags the SDK derives from distribution."""
    sm = distribution.get("smdistributed", {})
    mpi = distribution.get("mpi", {})
    return {
        "sagemaker_distributed_dataparallel_enabled": bool(
            sm.get("dataparallel", {}).get("enabled")
            or distribution.get("pytorchddp", {}).get("enabled")
        ),
        "sagemaker_mpi_enabled": bool(mpi.get("enabled")),
        "sagemaker_torch_distributed_enabled": bool(
            distribution.get("torch_distributed", {}).get("enabled")
        ),
        "sagemaker_modelparallel_enabled": bool(sm.get("modelparallel", {}).get("enabled")),
    }


def sagemaker_env(
    *,
    job_name: str,
    current_host: str,
    hosts: list[str],
    host_dir: PurePath,
    instance_type: str,
    num_gpus: int,
    num_cpus: int,
    num_neurons: int,
    network_interface: str,
    hyperparameters: Mapping[str, Any],
    channels: Mapping[str, str],
    entry_point: str,
    module_dir: str,
    distribution: Mapping[str, Any],
) -> dict[str, str]:
    """The ``SM_*`` variables of one host, mirroring sagemaker-training's ``to_env_vars``.

    ``channels`` maps names to the paths the data has on the host (``input/data/<name>``).
    """
    input_dir = host_dir / "input"
    output_dir = host_dir / "output"
    rc = resource_config(current_host, hosts, instance_type, network_interface)
    flags = framework_params(distribution)
    # The toolkit's: the group is a distribution group only when a distribution is enabled.
    distribution_groups = [INSTANCE_GROUP] if any(flags.values()) else []
    training_env: dict[str, Any] = {
        "job_name": job_name,
        "hosts": hosts,
        "current_host": current_host,
        "master_hostname": hosts[0],
        "is_master": current_host == hosts[0],
        "current_instance_type": instance_type,
        "current_instance_group": INSTANCE_GROUP,
        "current_instance_group_hosts": hosts,
        "instance_groups": [INSTANCE_GROUP],
        "instance_groups_dict": {g["instance_group_name"]: g for g in rc["instance_groups"]},
        "distribution_instance_groups": distribution_groups,
        "distribution_hosts": hosts if distribution_groups else [],
        "is_hetero": False,
        "network_interface_name": network_interface,
        "num_gpus": num_gpus,
        "num_cpus": num_cpus,
        "num_neurons": num_neurons,
        "hyperparameters": dict(hyperparameters),
        "user_entry_point": entry_point,
        "module_name": entry_point.removesuffix(".py"),
        "module_dir": module_dir,
        "framework_module": None,
        "additional_framework_parameters": flags,
        "resource_config": rc,
        "input_data_config": input_data_config(channels),
        "channel_input_dirs": dict(channels),
        "model_dir": str(host_dir / "model"),
        "input_dir": str(input_dir),
        "input_config_dir": str(input_dir / "config"),
        "output_dir": str(output_dir),
        "output_data_dir": str(output_dir / "data"),
        "output_intermediate_dir": str(output_dir / "intermediate"),
        "log_level": 20,
    }
    return sm_variables(training_env, hyperparameters, channels)


def sm_variables(
    training_env: Mapping[str, Any], hyperparameters: Mapping[str, Any], channels: Mapping[str, str]
) -> dict[str, str]:
    """The ``SM_*`` variables of a host whose training environment is ``training_env``: its
    fields under the toolkit's names, each channel's path and each hyperparameter."""
    te = training_env
    env = {
        "SM_HOSTS": te["hosts"],
        "SM_CURRENT_HOST": te["current_host"],
        "SM_CURRENT_INSTANCE_TYPE": te["current_instance_type"],
        "SM_CURRENT_INSTANCE_GROUP": INSTANCE_GROUP,
        "SM_CURRENT_INSTANCE_GROUP_HOSTS": te["current_instance_group_hosts"],
        "SM_INSTANCE_GROUPS": [INSTANCE_GROUP],
        "SM_INSTANCE_GROUPS_DICT": te["instance_groups_dict"],
        "SM_DISTRIBUTION_INSTANCE_GROUPS": te["distribution_instance_groups"],
        "SM_IS_HETERO": False,
        "SM_NETWORK_INTERFACE_NAME": te["network_interface_name"],
        "SM_NUM_GPUS": te["num_gpus"],
        "SM_NUM_CPUS": te["num_cpus"],
        "SM_NUM_NEURONS": te["num_neurons"],
        "SM_LOG_LEVEL": 20,
        "SM_HPS": dict(hyperparameters),
        "SM_USER_ENTRY_POINT": te["user_entry_point"],
        "SM_USER_ARGS": hyperparameter_args(hyperparameters),
        "SM_FRAMEWORK_PARAMS": te["additional_framework_parameters"],
        "SM_FRAMEWORK_MODULE": None,
        "SM_RESOURCE_CONFIG": te["resource_config"],
        "SM_INPUT_DATA_CONFIG": te["input_data_config"],
        "SM_CHANNELS": sorted(channels),
        "SM_MODULE_NAME": te["module_name"],
        "SM_MODULE_DIR": te["module_dir"],
        "SM_MODEL_DIR": te["model_dir"],
        "SM_INPUT_DIR": te["input_dir"],
        "SM_INPUT_CONFIG_DIR": te["input_config_dir"],
        "SM_OUTPUT_DIR": te["output_dir"],
        "SM_OUTPUT_DATA_DIR": te["output_data_dir"],
        "SM_OUTPUT_INTERMEDIATE_DIR": te["output_intermediate_dir"],
        "SM_TRAINING_ENV": te,
    }
    for name, path in channels.items():
        env[f"SM_CHANNEL_{name.upper()}"] = path
    for key, value in hyperparameters.items():
        env[f"SM_HP_{key.upper()}"] = value
    return {k: env_value(v) for k, v in env.items()}
