"""A pipelined model checkpointed through tenter.checkpoint, resumed in a fresh world: the
parameters, the optimizer's state and the losses that follow equal those of the run that went
on without interruption, bit for bit.

Four worlds: one saves and goes on, with 2 ranks (pp 2: 1F1B, interleaved) and with 4
(pp 2 x dp 2, replicated and FSDP2-sharded); another, of fresh processes, resumes each. Each
rank saves its own stages through DCP, under the whole model's parameter names, so the
checkpoint also loads into another layout and partition.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from pp_workers import SAVED_AT, WORKLOADS, make_model, resume_pipelined, save_pipelined
from torch import nn

from tenter.checkpoint import Checkpointer
from tenter.parallel.pipeline import LocalStages, StageModule
from tests.conftest import own_children
from tests.world import run_world

PP2 = {"pp": 2, "placement": "cluster"}
# The same split in every world (measured times could differ), so that each rank's state
# compares with the same rank's.
PARTITION = {"partition": "params"}

TWO_RANKS: dict[str, dict[str, Any]] = {
    "1f1b": {"mesh": PP2, "pipeline": {"schedule": "1f1b", "microbatches": 2, **PARTITION}},
    # Two stages per rank, saved through the pipeline's module, in the background.
    "interleaved": {
        "mesh": PP2,
        "pipeline": {"schedule": "interleaved", "microbatches": 2, **PARTITION},
        "by_module": True,
        "async": True,
    },
}
FOUR_RANKS: dict[str, dict[str, Any]] = {
    "pp2_dp2": {"mesh": PP2, "pipeline": {"schedule": "1f1b", "microbatches": 2, **PARTITION}},
    "pp2_fsdp2": {
        "mesh": {**PP2, "dp_shard": 2},
        "pipeline": {"schedule": "gpipe", "microbatches": 2, "data_parallel": "fsdp", **PARTITION},
    },
    # The GPT, each block split over 2 tensor-parallel ranks: DTensor shards in the checkpoint.
    "gpt_pp2_tp2": {
        "mesh": {**PP2, "tp": 2},
        "pipeline": {"schedule": "1f1b", "microbatches": 2, **PARTITION},
        "workload": "gpt",
    },
}
# The 2-rank pipeline's checkpoint (blocks split 3 + 3), resumed by 4 ranks: replicated over
# dp 2, and split 2 + 4.
RELAYOUT = {
    "pp2_dp2_from_pp2": {
        "mesh": PP2,
        "pipeline": {"schedule": "1f1b", "microbatches": 2, "partition": [2, 4]},
        "from": "1f1b",
    },
    # The tp 2 checkpoint resumed without tensor parallelism, replicated over dp 2 instead.
    "gpt_pp2_dp2_from_pp2_tp2": {
        "mesh": {**PP2, "tp": 1},
        "pipeline": {"schedule": "1f1b", "microbatches": 2, **PARTITION},
        "workload": "gpt",
        "from": "gpt_pp2_tp2",
    },
}


def test_checkpointer_saves_a_pipeline_sharded_and_refuses_to_replicate_it(
    tmp_path: Path,
) -> None:
    stage = StageModule(OrderedDict(head=nn.Linear(2, 2)))
    message = (
        "sharded=False would save rank 0's pipeline stages only: every rank holds its own "
        "stages, and saves them sharded; leave sharded unset"
    )
    for model in (stage, LocalStages([stage])):
        assert Checkpointer(model, dir=tmp_path).sharded
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            Checkpointer(model, dir=tmp_path, sharded=False)
    # The same block outside a pipeline is a plain module, saved replicated.
    assert not Checkpointer(stage.head, dir=tmp_path).sharded


@pytest.fixture(scope="module")
def worlds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("pipeline-checkpoints")
    out = {
        "saved2": run_world(save_pipelined, 2, args=(root, TWO_RANKS)).values(),
        "saved4": run_world(save_pipelined, 4, args=(root, FOUR_RANKS)).values(),
        "resumed2": run_world(resume_pipelined, 2, args=(root, TWO_RANKS)).values(),
        "resumed4": run_world(resume_pipelined, 4, args=(root, FOUR_RANKS | RELAYOUT)).values(),
        "root": root,
    }
    assert own_children() == []
    return out


def assert_equal(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    assert actual.keys() == expected.keys()
    for key, value in expected.items():
        assert torch.equal(actual[key], value), key


@pytest.mark.slow
@pytest.mark.parametrize(
    ("scenario", "size"), [(name, 2) for name in TWO_RANKS] + [(name, 4) for name in FOUR_RANKS]
)
def test_pipeline_resumed_in_a_fresh_world_continues_as_if_never_interrupted(
    worlds: dict[str, Any], scenario: str, size: int
) -> None:
    saved, resumed = worlds[f"saved{size}"], worlds[f"resumed{size}"]
    for rank in range(size):
        before, after = saved[rank][scenario], resumed[rank][scenario]
        assert after["step"] == SAVED_AT
        assert_equal(after["restored"], before["saved"])
        assert after["losses"] == before["losses"], rank
        assert_equal(after["final"], before["final"])
    # Some rank reported the losses, and the stages together hold the whole model.
    assert any(r[scenario]["losses"] for r in saved)
    held = {key.split(":")[0] for r in saved for key in r[scenario]["saved"]}
    workload = WORKLOADS[FOUR_RANKS.get(scenario, {}).get("workload", "mlp")]
    assert held == set(dict(workload.make_model(0).named_parameters()))


@pytest.mark.slow
def test_each_pipeline_rank_writes_its_own_stages_under_the_whole_model_s_names(
    worlds: dict[str, Any],
) -> None:
    folder = worlds["root"] / "1f1b" / f"step-{SAVED_AT:08d}" / "sharded"
    assert sorted(p.name for p in folder.iterdir()) == [".metadata", "__0_0.distcp", "__1_0.distcp"]
    keys = set(dcp.FileSystemReader(folder).read_metadata().state_dict_metadata)
    names = dict(make_model().named_parameters())
    assert {k.removeprefix("model.") for k in keys if k.startswith("model.")} == set(names)
    # The optimizer's state is keyed per parameter too: ranks' keys never collide.
    assert {f"optimizer.state.{name}.exp_avg" for name in names} <= keys


@pytest.mark.slow
def test_pipeline_checkpoint_loads_into_another_layout_and_partition(
    worlds: dict[str, Any],
) -> None:
    saved = {k: v for r in worlds["saved2"] for k, v in r["1f1b"]["saved"].items()}
    assert worlds["saved2"][0]["1f1b"]["sizes"] == [3, 3]
    for result in worlds["resumed4"]:
        relaid = result["pp2_dp2_from_pp2"]
        assert relaid["step"] == SAVED_AT
        assert_equal(relaid["restored"], {k: saved[k] for k in relaid["restored"]})
    held = {k for r in worlds["resumed4"] for k in r["pp2_dp2_from_pp2"]["restored"]}
    assert held == set(saved)


@pytest.mark.slow
def test_tensor_parallel_checkpoint_loads_without_tensor_parallelism_and_trains_on_alike(
    worlds: dict[str, Any],
) -> None:
    saved_runs = [r["gpt_pp2_tp2"] for r in worlds["saved4"]]
    saved = {k: v for run in saved_runs for k, v in run["saved"].items()}
    resumed = [r["gpt_pp2_dp2_from_pp2_tp2"] for r in worlds["resumed4"]]
    for run in resumed:
        assert run["step"] == SAVED_AT
        # Whole tensors: the tp shards were gathered into plain parameters and Adam state.
        assert_equal(run["restored"], {k: saved[k] for k in run["restored"]})
    assert {k for run in resumed for k in run["restored"]} == set(saved)
    # The steps after the checkpoint: the same losses, to fp32 rounding of another layout.
    expected = next(run["losses"] for run in saved_runs if run["losses"])
    for run in resumed:
        if run["losses"]:
            torch.testing.assert_close(run["losses"], expected, rtol=1e-5, atol=1e-7)
