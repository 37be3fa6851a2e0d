"""Numerical parity: pipelined, data-parallel, sharded and tensor-parallel training matches
single-process training.

Each world runs every scenario in the same spawned processes (the processes cost more than
the training), then each scenario is checked on its own: the losses of every step and every
parameter after the last step equal the single-process run's within 1e-5 relative (fp32).
The GPT of examples/gpt trains 10 steps on 4 ranks in each layout the issue names: tp 2,
HSDP 2 x 2, pp 2 x tp 2, pp 2 x dp 2, and SMP v2's FSDP x tp from the job's parameters.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch
from pp_workers import reference, train_pipelined

from tests.conftest import own_children
from tests.world import run_world

pytestmark = pytest.mark.slow

RTOL = 1e-5
ATOL = 1e-7  # for parameters that are (nearly) zero, where a relative bound means nothing

TWO_RANKS: dict[str, dict[str, Any]] = {
    "gpipe": {"mesh": {"pp": 2}, "pipeline": {"schedule": "gpipe", "microbatches": 4}},
    "1f1b": {"mesh": {"pp": 2}, "pipeline": {"schedule": "1f1b", "microbatches": 4}},
    "interleaved": {
        "mesh": {"pp": 2},
        "pipeline": {"schedule": "interleaved", "microbatches": 4, "virtual_stages": 2},
    },
    "explicit_partition": {
        "mesh": {"pp": 2},
        "pipeline": {"schedule": "1f1b", "microbatches": 2, "partition": [1, 5]},
    },
    "accumulate": {
        "mesh": {"pp": 2},
        "pipeline": {"schedule": "1f1b", "microbatches": 2, "partition": "params"},
        "accumulate": 2,
    },
    "pp1_ddp": {"mesh": {"pp": 1}, "pipeline": {"schedule": "gpipe", "microbatches": 2}},
    "pp1_fsdp": {
        "mesh": {"pp": 1, "dp_shard": 2},
        "pipeline": {"schedule": "gpipe", "microbatches": 2, "data_parallel": "fsdp"},
    },
}

FOUR_RANKS: dict[str, dict[str, Any]] = {
    "pp2_dp2_cluster": {
        "mesh": {"pp": 2, "placement": "cluster"},
        "pipeline": {"schedule": "1f1b", "microbatches": 4},
    },
    "pp2_dp2_interleaved_spread": {
        "mesh": {"pp": 2, "placement": "spread"},
        "pipeline": {"schedule": "interleaved", "microbatches": 2, "virtual_stages": 2},
    },
    # Everything from the job's distribution, as `tenter run` exports it.
    "from_env": {"mesh": {}, "pipeline": {}},
}

# SMP parameters of the "from_env" scenario: 'simple' is GPipe, 'spread' puts the
# data-parallel peers on neighbouring ranks.
DISTRIBUTION = {
    "smdistributed": {
        "modelparallel": {
            "enabled": True,
            "parameters": {
                "pipeline_parallel_degree": 2,
                "microbatches": 2,
                "pipeline": "simple",
                "ddp": True,
                "placement_strategy": "spread",
                "memory_weight": 0.5,
            },
        }
    },
    "torch_distributed": {"enabled": True},
}


# The GPT world's job is SMP v2: shard over 2 ranks, tp 2, activations checkpointed and
# offloaded. Scenarios that name their degrees override the mesh; all of them inherit the
# checkpointing and offloading, which must not change the arithmetic.
SMP_V2 = {
    "smdistributed": {
        "modelparallel": {
            "enabled": True,
            "parameters": {
                "hybrid_shard_degree": 2,
                "tensor_parallel_degree": 2,
                "sm_activation_offloading": True,
                "random_seed": 7,
            },
        }
    },
    "torch_distributed": {"enabled": True},
}
# SMP v1's tensor parallelism: tp 2, the remaining 2 ranks replicas by ddp: true.
SMP_V1_TP = {
    "smdistributed": {
        "modelparallel": {
            "enabled": True,
            "parameters": {
                "pipeline_parallel_degree": 1,
                "tensor_parallel_degree": 2,
                "ddp": True,
                "pipeline": "simple",
                "skip_tracing": True,
            },
        }
    },
    "torch_distributed": {"enabled": True},
}
GPT_SMP_V1 = {"smp_v1_tp2_ddp": {"mesh": {}, "pipeline": {}, "workload": "gpt"}}
ONE_STAGE = {"schedule": "gpipe", "microbatches": 1, "partition": "params"}
TWO_STAGES = {"schedule": "1f1b", "microbatches": 2, "partition": "params"}
GPT_FOUR_RANKS: dict[str, dict[str, Any]] = {
    "tp2": {
        "mesh": {"pp": 1, "dp_shard": 1, "tp": 2},
        "pipeline": {**ONE_STAGE, "data_parallel": "ddp"},
    },
    "hsdp_2x2": {
        "mesh": {"pp": 1, "dp_shard": 2, "tp": 1},
        "pipeline": {**ONE_STAGE, "data_parallel": "fsdp"},
    },
    "pp2_tp2": {"mesh": {"pp": 2, "dp_shard": 1, "tp": 2}, "pipeline": TWO_STAGES},
    "pp2_dp2_tp1": {
        "mesh": {"pp": 2, "dp_shard": 1, "tp": 1},
        "pipeline": {**TWO_STAGES, "data_parallel": "ddp"},
    },
    "smp_v2_fsdp_tp2": {"mesh": {}, "pipeline": {}},
}
for _scenario in GPT_FOUR_RANKS.values():
    _scenario["workload"] = "gpt"


def train_world(
    size: int, scenarios: dict[str, dict[str, Any]], distribution: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """Every scenario on ``size`` fresh ranks, the job's ``distribution`` exported as
    ``tenter run`` exports it; the processes must all be gone after."""
    env = {"TENTER_DISTRIBUTION": json.dumps(distribution)} if distribution else None
    results = run_world(train_pipelined, size, args=(scenarios,), env=env, deadline_s=400)
    assert own_children() == []
    return results.values()


@pytest.fixture(scope="module")
def two_ranks() -> list[dict[str, Any]]:
    return train_world(2, TWO_RANKS)


@pytest.fixture(scope="module")
def four_ranks() -> list[dict[str, Any]]:
    return train_world(4, FOUR_RANKS, DISTRIBUTION)


@pytest.fixture(scope="module")
def gpt_four_ranks() -> list[dict[str, Any]]:
    return train_world(4, GPT_FOUR_RANKS, SMP_V2)


@pytest.fixture(scope="module")
def gpt_smp_v1() -> list[dict[str, Any]]:
    return train_world(4, GPT_SMP_V1, SMP_V1_TP)


def assert_matches_reference(results: list[dict[str, Any]], scenario: str) -> None:
    spec = (TWO_RANKS | FOUR_RANKS | GPT_FOUR_RANKS | GPT_SMP_V1)[scenario]
    ref_losses, ref_params = reference(spec.get("accumulate", 1), spec.get("workload", "mlp"))
    runs = [r[scenario] for r in results]
    last = [run for run in runs if run["losses"]]
    assert last, "no rank ran the last stage"
    for run in last:
        torch.testing.assert_close(run["losses"], ref_losses, rtol=RTOL, atol=ATOL)
    seen: set[str] = set()
    for run in runs:
        for name, value in run["params"].items():
            torch.testing.assert_close(
                torch.tensor(value), ref_params[name], rtol=RTOL, atol=ATOL, msg=name
            )
            seen.add(name)
    assert seen == set(ref_params), "every parameter lives on some rank"


@pytest.mark.parametrize("scenario", list(TWO_RANKS))
def test_pipeline_matches_single_process_if_two_ranks(
    two_ranks: list[dict[str, Any]], scenario: str
) -> None:
    assert_matches_reference(two_ranks, scenario)


@pytest.mark.parametrize("scenario", list(FOUR_RANKS))
def test_pipeline_matches_single_process_if_pp2_dp2(
    four_ranks: list[dict[str, Any]], scenario: str
) -> None:
    assert_matches_reference(four_ranks, scenario)


@pytest.mark.parametrize("scenario", list(GPT_FOUR_RANKS))
def test_gpt_matches_single_process_if_tp_hsdp_or_3d_on_four_ranks(
    gpt_four_ranks: list[dict[str, Any]], scenario: str
) -> None:
    assert_matches_reference(gpt_four_ranks, scenario)


def test_gpt_matches_single_process_if_smp_v1_tensor_parallel_with_ddp(
    gpt_smp_v1: list[dict[str, Any]],
) -> None:
    assert_matches_reference(gpt_smp_v1, "smp_v1_tp2_ddp")
    infos = [r["smp_v1_tp2_ddp"]["info"] for r in gpt_smp_v1]
    assert [(i.dp_rank, i.tp_rank) for i in infos] == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_gpt_layouts_put_ranks_where_asked(gpt_four_ranks: list[dict[str, Any]]) -> None:
    def coords(scenario: str) -> list[tuple[int, int, int]]:
        infos = [r[scenario]["info"] for r in gpt_four_ranks]
        return [(i.pp_rank, i.dp_rank, i.tp_rank) for i in infos]

    # cluster placement: tp innermost (neighbouring ranks), then pp, then dp.
    assert coords("tp2") == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1)]
    assert coords("pp2_tp2") == [(0, 0, 0), (0, 0, 1), (1, 0, 0), (1, 0, 1)]
    assert coords("pp2_dp2_tp1") == [(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0)]
    v2 = [r["smp_v2_fsdp_tp2"]["info"] for r in gpt_four_ranks]
    assert {(i.dp_replicate_rank, i.dp_shard_rank, i.tp_rank) for i in v2} == {
        (0, s, t) for s in range(2) for t in range(2)
    }
    hsdp = [r["hsdp_2x2"]["info"] for r in gpt_four_ranks]
    assert [(i.dp_replicate_rank, i.dp_shard_rank) for i in hsdp] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (1, 1),
    ]


def test_pipeline_places_stages_as_asked(
    two_ranks: list[dict[str, Any]], four_ranks: list[dict[str, Any]]
) -> None:
    assert [r["interleaved"]["stages"] for r in two_ranks] == [[0, 2], [1, 3]]
    assert two_ranks[0]["explicit_partition"]["sizes"] == [1, 5]
    # cluster (DPT): a pipeline on neighbouring ranks; spread (TPD): replicas neighbour.
    cluster = [
        (r["pp2_dp2_cluster"]["info"].pp_rank, r["pp2_dp2_cluster"]["info"].dp_rank)
        for r in four_ranks
    ]
    assert cluster == [(0, 0), (1, 0), (0, 1), (1, 1)]
    for scenario in ("pp2_dp2_interleaved_spread", "from_env"):
        spread = [(r[scenario]["info"].pp_rank, r[scenario]["info"].dp_rank) for r in four_ranks]
        assert spread == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [r["from_env"]["info"].pp_size for r in four_ranks] == [2] * 4
