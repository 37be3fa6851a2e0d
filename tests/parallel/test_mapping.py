"""SageMaker model-parallel parameters -> ParallelConfig: every parameter, and the errors."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tenter.parallel.mapping import (
    ParallelConfig,
    describe_mesh,
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
        ({"tensor_parallel_degree": 2, "ddp": True}, "tp", 2),
        ({"bf16": True}, "mixed_precision", "bf16"),
        ({"offload_activations": True}, "offload_activations", True),
        ({"offload_activations": True}, "activation_checkpointing", True),
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
        ("active_microbatches", 1),
        ("contiguous", False),
        ("fp16", True),
        ("fp16_params", True),
        ("delayed_parameter_initialization", True),
        ("prescaled_batch", True),
        ("shard_optimizer_state", True),
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
    fix = "remove it" if default is None else f"remove it or set it to {default!r}"
    assert problem.fix == fix and problem.message.endswith(")")


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
            "2 data-parallel replicas (4 ranks / pp 2 / tp 1) need data parallelism, but ddp is "
            f"false: set {PATH}.ddp: true"
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
        "  schedule 1f1b, 4 microbatches, partition auto (memory_weight 0.8)\n"
        "  tp 1, tensor parallel (tensor_parallel_degree): every rank alone\n"
        "  pp 2, pipeline stages (pipeline_parallel_degree): [0,2] [1,3]\n"
        "  dp_replicate 2, replicas (ddp; HSDP's outer dimension): [0,1] [2,3]\n"
        "  dp_shard 1, FSDP2 shards (sharded_data_parallel_degree, hybrid_shard_degree): "
        "every rank alone"
    )


def v2(**params: Any) -> ModelParallelParameters:
    return ModelParallelParameters.model_validate(params)


@pytest.mark.parametrize(
    ("params", "expected"),
    [
        # hybrid_shard_degree 0: FSDP over every data-parallel rank.
        ({"tensor_parallel_degree": 2}, {"tp": 2, "dp_replicate": 1, "dp_shard": 4, "pp": 1}),
        ({"hybrid_shard_degree": 0, "random_seed": 3}, {"dp_replicate": 1, "dp_shard": 8}),
        ({"hybrid_shard_degree": 1, "random_seed": 3}, {"dp_replicate": 8, "dp_shard": 1}),
        ({"hybrid_shard_degree": 2}, {"dp_replicate": 4, "dp_shard": 2}),
        ({"hybrid_shard_degree": 2, "tensor_parallel_degree": 2}, {"dp_replicate": 2, "tp": 2}),
    ],
)
def test_from_smp_maps_v2_degrees_to_mesh_dimensions(
    params: dict[str, Any], expected: dict[str, int]
) -> None:
    dims = from_smp(v2(**params)).dims(8)
    assert {k: getattr(dims, k) for k in expected} == expected


def test_from_smp_maps_v2_memory_and_seed_parameters() -> None:
    config = from_smp(
        v2(
            sm_activation_offloading=True,
            random_seed=5,
            allow_empty_shards=True,
            hybrid_shard_degree=2,
        )
    )
    assert (config.activation_checkpointing, config.offload_activations) == (True, True)
    assert (config.random_seed, config.allow_empty_shards, config.data_parallel) == (
        5,
        True,
        "fsdp",
    )
    assert from_smp(v2(hybrid_shard_degree=1)).data_parallel == "ddp"


@pytest.mark.parametrize(
    ("name", "value", "why"),
    [
        ("context_parallel_degree", 2, "needs CUDA"),
        ("expert_parallel_degree", 2, "no mixture-of-experts layers"),
        ("activation_loading_horizon", 4, "no prefetch horizon"),
    ],
)
def test_from_smp_says_not_supported_yet_if_v2_cp_ep_or_horizon(
    name: str, value: int, why: str
) -> None:
    with pytest.raises(SpecError) as e:
        from_smp(v2(hybrid_shard_degree=2, **{name: value}))
    assert [p.path for p in e.value.problems] == [f"{PATH}.{name}"]
    assert f"{value} is not supported yet by tenter.parallel (" in str(e.value)
    assert why in str(e.value)


def test_from_smp_refuses_v1_and_v2_parameters_mixed() -> None:
    with pytest.raises(
        SpecError,
        match=re.escape(
            f"{PATH}: mixes SMP v1 parameters (pipeline_parallel_degree, ddp) with SMP v2 "
            "parameters (hybrid_shard_degree); "
        ),
    ):
        from_smp(smp(ddp=True, hybrid_shard_degree=2))


def test_describe_mesh_shows_dims_sizes_and_groups_of_a_v2_job() -> None:
    distribution = {
        "torch_distributed": {"enabled": True},
        "smdistributed": {
            "modelparallel": {
                "enabled": True,
                "parameters": {"hybrid_shard_degree": 2, "tensor_parallel_degree": 2},
            }
        },
    }
    assert describe_mesh(distribution, 8) == [
        "mesh: dp_replicate 2 x dp_shard 2 x pp 1 x tp 2 = 8 ranks, placement cluster",
        "  dp_replicate 2, replicas (ddp; HSDP's outer dimension): [0,4] [1,5] [2,6] [3,7]",
        "  dp_shard 2, FSDP2 shards (sharded_data_parallel_degree, hybrid_shard_degree): "
        "[0,2] [1,3] [4,6] [5,7]",
        "  pp 1, pipeline stages (pipeline_parallel_degree): every rank alone",
        "  tp 2, tensor parallel (tensor_parallel_degree): [0,1] [2,3] [4,5] [6,7]",
    ]


def test_describe_mesh_is_one_data_parallel_dimension_without_model_parallelism() -> None:
    lines = describe_mesh({}, 4)
    assert (
        lines[0] == "mesh: dp_replicate 4 x dp_shard 1 x pp 1 x tp 1 = 4 ranks, placement cluster"
    )
    assert lines[1] == "  dp_replicate 4, replicas (ddp; HSDP's outer dimension): [0,1,2,3]"
