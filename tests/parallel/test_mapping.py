"""SageMaker model-parallel parameters -> ParallelConfig: every parameter, and the errors."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tenter.parallel.mapping import (
    ParallelConfig,
    from_env,
    from_smp,
    layout,
)
from tenter.spec.errors import SpecError
from tenter.spec.modelparallel import ModelParallelParameters

PATH = "distribution.smdistributed.modelparallel.parameters"


def smp(**params: Any) -> ModelParallelParameters:
    return ModelParallelParameters.model_validate({"pipeline_parallel_degree": 2, **params})


def test_from_smp_maps_smp_defaults_to_1f1b_auto_partition() -> None:
    assert from_smp(smp()) == ParallelConfig(
        pp=2,
        dp_shard=1,
        placement="cluster",
        microbatches=1,
        schedule="1f1b",
        partition="auto",
        memory_weight=0.8,
        data_parallel="none",
    )


@pytest.mark.parametrize(
    ("params", "field", "value"),
    [
        ({"pipeline_parallel_degree": 4}, "pp", 4),
        ({"microbatches": 8}, "microbatches", 8),
        ({"pipeline": "simple"}, "schedule", "gpipe"),
        ({"pipeline": "interleaved"}, "schedule", "1f1b"),
        ({"placement_strategy": "spread"}, "placement", "spread"),
        ({"placement_strategy": "TDP"}, "placement", "TDP"),
        ({"ddp": True}, "data_parallel", "ddp"),
        ({"ddp": False}, "data_parallel", "none"),
        ({"sharded_data_parallel_degree": 4, "ddp": True}, "data_parallel", "fsdp"),
        ({"sharded_data_parallel_degree": 4}, "dp_shard", 4),
        ({"auto_partition": True}, "partition", "auto"),
        ({"auto_partition": False, "default_partition": 0}, "partition", "explicit"),
        ({"skip_tracing": True}, "partition", "params"),
        ({"memory_weight": 0.25}, "memory_weight", 0.25),
    ],
)
def test_from_smp_maps_each_supported_parameter(
    params: dict[str, Any], field: str, value: object
) -> None:
    assert getattr(from_smp(smp(**params)), field) == value


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("optimize", "memory"),
        ("horovod", True),
        ("tensor_parallel_degree", 2),
        ("active_microbatches", 1),
        ("contiguous", False),
        ("fp16", True),
        ("bf16", True),
        ("fp16_params", True),
        ("delayed_parameter_initialization", True),
        ("prescaled_batch", True),
        ("shard_optimizer_state", True),
        ("offload_activations", True),
        ("activation_loading_horizon", 8),
        ("ddp_port", 29600),
        ("ddp_dist_backend", "gloo"),
        ("fast_mode", True),
        ("static_mode", True),
        ("predefined_hooks", False),
    ],
)
def test_from_smp_says_not_supported_yet_if_an_unsupported_parameter_is_set(
    name: str, value: object
) -> None:
    with pytest.raises(SpecError) as e:
        from_smp(smp(**{name: value}))
    assert len(e.value.problems) == 1
    problem = e.value.problems[0]
    assert problem.path == f"{PATH}.{name}"
    assert problem.message.startswith(f"{value!r} is not supported yet by tenter.parallel (")
    default = getattr(ModelParallelParameters(), name)
    assert problem.message.endswith(f"remove it or set it to {default!r}")


def test_from_smp_lists_every_problem_at_once() -> None:
    with pytest.raises(SpecError) as e:
        from_smp(smp(fp16=True, horovod=True, default_partition=1))
    assert [p.path.rsplit(".", 1)[1] for p in e.value.problems] == [
        "horovod",
        "fp16",
        "default_partition",
    ]
    assert "1 has no effect with auto_partition: true" in str(e.value)


def test_dims_asks_for_ddp_if_replicas_without_data_parallelism() -> None:
    config = from_smp(smp(ddp=False))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "2 data-parallel replicas (4 ranks / pp 2) need data parallelism, but ddp is false: "
            f"set {PATH}.ddp: true"
        ),
    ):
        config.dims(4)
    assert config.dims(2).dp == 1


def test_from_env_reads_the_distribution_json() -> None:
    distribution = {
        "smdistributed": {
            "modelparallel": {
                "enabled": True,
                "parameters": {"pipeline_parallel_degree": 2, "microbatches": 4, "ddp": True},
            }
        },
        "mpi": {"enabled": True},
    }
    config = from_env({"TENTER_DISTRIBUTION": json.dumps(distribution)})
    assert (config.pp, config.microbatches, config.data_parallel) == (2, 4, "ddp")


def test_from_env_reads_sagemaker_mp_parameters_with_the_old_partitions_name() -> None:
    config = from_env({"SM_HP_MP_PARAMETERS": json.dumps({"partitions": 4, "ddp": True})})
    assert config.pp == 4


def test_from_env_is_plain_data_parallelism_if_no_model_parallelism() -> None:
    assert from_env({}) == ParallelConfig()
    assert from_env(
        {"TENTER_DISTRIBUTION": json.dumps({"torch_distributed": {"enabled": True}})}
    ) == (ParallelConfig())


def test_from_env_names_the_variable_if_json_is_bad() -> None:
    with pytest.raises(ValueError, match="TENTER_DISTRIBUTION is not valid JSON"):
        from_env({"TENTER_DISTRIBUTION": "{nope"})


def test_layout_shows_groups_schedule_and_partition() -> None:
    config = from_smp(smp(ddp=True, microbatches=4, placement_strategy="spread"))
    assert layout(config, 4) == (
        "parallel: tp 1 x pp 2 x dp_replicate 2 x dp_shard 1 = 4 ranks, placement spread\n"
        "  pipelines (pp groups): [0,2] [1,3]\n"
        "  data parallel (DDP): [0,1] [2,3]\n"
        "  schedule 1f1b, 4 microbatches, partition auto (memory_weight 0.8)"
    )
