"""SMP v2 parameters in a job spec: accepted, checked against AWS's rules before launch, told
apart from SMP v1's, and refused with exit 2 (field path and fix, nothing launched)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tenter.spec import SpecError, load
from tenter.spec.modelparallel import SHARED, V2_ONLY, ModelParallelParameters
from tests.conftest import tenter

HERE = Path(__file__).parent
PATH = "distribution.smdistributed.modelparallel.parameters"


def job(parameters: dict[str, Any], *, torch_distributed: bool = True) -> dict[str, Any]:
    return {
        "entry_point": Path(__file__).name,
        "source_dir": str(HERE),
        "hosts": 2,
        "processes_per_host": 2,
        "distribution": {
            "torch_distributed": {"enabled": torch_distributed},
            "smdistributed": {"modelparallel": {"enabled": True, "parameters": parameters}},
        },
    }


def problems(parameters: dict[str, Any], **kwargs: bool) -> list[str]:
    with pytest.raises(SpecError) as info:
        load(job(parameters, **kwargs), HERE)
    return [str(p) for p in info.value.problems]


def test_every_parameter_belongs_to_v1_v2_or_both() -> None:
    names = set(ModelParallelParameters.model_fields)
    assert set(V2_ONLY) | set(SHARED) <= names
    assert {"pipeline_parallel_degree", "ddp", "microbatches"} <= names - set(V2_ONLY)


def test_load_accepts_every_v2_parameter() -> None:
    spec, _ = load(
        job(
            {
                "hybrid_shard_degree": 2,
                "tensor_parallel_degree": 2,
                "context_parallel_degree": 1,
                "expert_parallel_degree": 1,
                "sm_activation_offloading": True,
                "fsdp_cache_flush_warnings": False,
                "allow_empty_shards": True,
                "random_seed": 12345,
            }
        ),
        HERE,
    )
    params = spec.distribution.model_parallel
    assert params is not None and params.version == 2
    assert (params.hybrid_shard_degree, params.tensor_parallel_degree) == (2, 2)


@pytest.mark.parametrize(
    ("parameters", "expected"),
    [
        (
            {"tensor_parallel_degree": 3},
            f"{PATH}.tensor_parallel_degree: 3 does not divide the world size 4",
        ),
        (
            {"hybrid_shard_degree": 8},
            f"{PATH}.hybrid_shard_degree: 8 exceeds the world size 4. Fix: use 0",
        ),
        (
            {"hybrid_shard_degree": 4, "tensor_parallel_degree": 2},
            f"{PATH}.hybrid_shard_degree: 4 does not divide the 2 data-parallel ranks",
        ),
        (
            {"hybrid_shard_degree": 1, "context_parallel_degree": 2},
            f"{PATH}.context_parallel_degree: 2 exceeds hybrid_shard_degree (1)",
        ),
        (
            {"expert_parallel_degree": 3},
            f"{PATH}.expert_parallel_degree: 3 does not divide the world size 4",
        ),
        (
            {"hybrid_shard_degree": -1},
            f"{PATH}.hybrid_shard_degree: -1 is not greater than or equal to 0. Fix: make it "
            "greater than or equal to 0",
        ),
        # Valid for SMP, not done by tenter.parallel: refused before launch all the same.
        (
            {"hybrid_shard_degree": 2, "context_parallel_degree": 2},
            f"{PATH}.context_parallel_degree: 2 is not supported yet by tenter.parallel "
            "(torch's context_parallel has no sharding rule for the CPU attention kernel, so it "
            "needs CUDA",
        ),
        (
            {"expert_parallel_degree": 2},
            f"{PATH}.expert_parallel_degree: 2 is not supported yet by tenter.parallel",
        ),
        (
            {"hybrid_shard_degree": 2, "activation_loading_horizon": 2},
            f"{PATH}.activation_loading_horizon: 2 is not supported yet by tenter.parallel",
        ),
        ({"random_seed": -5}, f"{PATH}.random_seed: -5 is not greater than or equal to 0"),
        (
            {"activation_loading_horizon": 0},
            f"{PATH}.activation_loading_horizon: 0 is not greater than 0",
        ),
        (
            {"pipeline_parallel_degree": 2, "ddp": True, "hybrid_shard_degree": 2},
            f"{PATH}: mixes SMP v1 parameters (pipeline_parallel_degree, ddp) with SMP v2 "
            "parameters (hybrid_shard_degree); SMP v2 (torch.sagemaker) replaced v1's settings",
        ),
    ],
)
def test_load_enforces_the_v2_rules(parameters: dict[str, Any], expected: str) -> None:
    found = problems(parameters)
    assert any(p.startswith(expected) for p in found), found


def test_load_requires_torch_distributed_for_v2() -> None:
    assert problems({"hybrid_shard_degree": 2}, torch_distributed=False) == [
        "distribution.torch_distributed.enabled: SMP v2 parameters (hybrid_shard_degree) need "
        "the torch_distributed launcher, as SageMaker's SMP v2 does. Fix: set "
        "distribution.torch_distributed.enabled: true"
    ]


def test_tensor_parallel_alone_is_v2_and_with_v1_parameters_is_v1() -> None:
    assert ModelParallelParameters(tensor_parallel_degree=2).version == 2
    v1 = ModelParallelParameters(tensor_parallel_degree=2, pipeline_parallel_degree=1, ddp=True)
    assert v1.version == 1
    assert ModelParallelParameters().version == 1  # pipeline_parallel_degree is then required


def test_cli_exits_2_naming_the_field_if_v1_and_v2_are_mixed(
    tmp_path: Path, tenter_home: Path
) -> None:
    (tmp_path / "train.py").write_text("raise SystemExit('must not run')\n")
    (tmp_path / "job.yaml").write_text(
        "entry_point: train.py\ninstance_count: 2\nprocesses_per_host: 2\n"
        "distribution:\n  torch_distributed: {enabled: true}\n  smdistributed:\n"
        "    modelparallel:\n      enabled: true\n"
        "      parameters: {pipeline_parallel_degree: 2, ddp: true, tensor_parallel_degree: 2,\n"
        "                   hybrid_shard_degree: 2}\n"
    )
    done = tenter("run", str(tmp_path / "job.yaml"))
    assert done.returncode == 2, done.stderr
    assert f"{PATH}: mixes SMP v1 parameters" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tenter_home / "jobs").exists()
