"""Tensor parallelism's refusals (a block type without a plan, a parameter too small to give
every rank a shard), the torch version guard, and bf16 mixed precision on the GPT."""

from __future__ import annotations

import re
from typing import Any

import pytest
import torch
from pp_workers import reference, tp_refusals, train_pipelined

from tenter.parallel.pipeline import require_torch
from tests.conftest import own_children
from tests.world import run_world

BF16 = {
    "bf16_fsdp2": {
        "mesh": {"pp": 1, "dp_shard": 2, "tp": 1},
        "pipeline": {
            "schedule": "gpipe",
            "microbatches": 1,
            "partition": "params",
            "data_parallel": "fsdp",
            "mixed_precision": "bf16",
        },
        "workload": "gpt",
    }
}


@pytest.mark.slow
def test_tensor_parallel_names_unplanned_block_types_and_empty_shards() -> None:
    results = run_world(tp_refusals, 2).values()
    assert own_children() == []
    for result in results:
        assert result["unplanned"].startswith(
            "tensor_parallel_degree 2: no tensor-parallel plan for the block types Linear, "
            "Unplanned, so their parameters cannot be placed; register one per type with "
            "@tenter.parallel.tp_plan(<type>)"
        )
        assert result["empty_shard"] == (
            "tensor_parallel_degree 2 leaves some ranks an empty shard of lin.weight (1, 4) "
            "along dim 0, lin.bias (1,) along dim 0; lower tensor_parallel_degree, widen the "
            "layer, or set allow_empty_shards: true"
        )
        assert result["allowed_loss"] == "True"
    assert sorted(r["local_rows"] for r in results) == ["0", "1"]


@pytest.mark.slow
def test_bf16_mixed_precision_trains_the_gpt_close_to_fp32() -> None:
    results: list[dict[str, Any]] = run_world(train_pipelined, 2, args=(BF16,)).values()
    assert own_children() == []
    ref_losses, ref_params = reference(workload="gpt")
    run = results[0]["bf16_fsdp2"]
    # bf16 keeps 8 bits of mantissa: close to fp32 training, and not equal to it.
    torch.testing.assert_close(run["losses"], ref_losses, rtol=2e-2, atol=0)
    assert run["losses"] != pytest.approx(ref_losses, rel=1e-6)
    for name, value in run["params"].items():
        torch.testing.assert_close(torch.tensor(value), ref_params[name], rtol=0, atol=2e-2)


def test_require_torch_names_the_feature_and_the_version() -> None:
    require_torch("2.0", "anything")  # this torch is newer
    message = (
        f"tensor parallelism needs torch >= 99.1; this is torch {torch.__version__}: "
        "pip install 'torch>=99.1'"
    )
    with pytest.raises(RuntimeError, match=f"^{re.escape(message)}$"):
        require_torch("99.1", "tensor parallelism")
