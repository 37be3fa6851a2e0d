"""ParallelDims: validation with the arithmetic in the message, and the rank layout."""

from __future__ import annotations

import re

import pytest

from tenter.parallel.dims import PLACEMENTS, ParallelDims, mesh_order


def test_post_init_infers_the_minus_one_degree() -> None:
    dims = ParallelDims(world_size=8, pp=2)
    assert (dims.pp, dims.dp_replicate, dims.dp_shard, dims.tp, dims.dp) == (2, 4, 1, 1, 4)
    dims = ParallelDims(world_size=8, pp=2, dp_replicate=1, dp_shard=-1)
    assert (dims.dp_replicate, dims.dp_shard) == (1, 4)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"world_size": 6, "pp": 4},
            "the parallel degrees pp 4 x dp_shard 1 x tp 1 = 4 does not leave a whole "
            "dp_replicate (6); change a degree or the number of processes",
        ),
        (
            {"world_size": 8, "pp": 2, "dp_replicate": 2},
            "the parallel degrees pp 2 x dp_replicate 2 x dp_shard 1 x tp 1 = 4 must equal "
            "the world size (8)",
        ),
        ({"world_size": 4, "pp": 0}, "pp (0) must be a positive degree, or -1 to infer it"),
        ({"world_size": 4, "pp": -1}, "pp and dp_replicate are all -1"),
        (
            {"world_size": 4, "pp": 2, "tp": 4},
            "the parallel degrees pp 2 x dp_shard 1 x tp 4 = 8 does not leave a whole",
        ),
        ({"world_size": 4, "placement": "DPP"}, "placement 'DPP' is not valid"),
        ({"world_size": 0}, "world_size (0) must be at least 1"),
    ],
)
def test_post_init_raises_with_the_numbers_if_degrees_do_not_fit(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        ParallelDims(**kwargs)  # type: ignore[arg-type]


def test_mesh_order_reads_placement_from_outermost_to_innermost() -> None:
    assert mesh_order("cluster") == ("dp_replicate", "dp_shard", "pp", "tp")
    assert mesh_order("spread") == ("tp", "pp", "dp_replicate", "dp_shard")
    assert mesh_order("PDT") == ("pp", "dp_replicate", "dp_shard", "tp")
    assert len(PLACEMENTS) == 8


def test_groups_put_a_pipeline_on_neighbouring_ranks_if_cluster() -> None:
    dims = ParallelDims(world_size=8, pp=4, placement="cluster")
    assert dims.groups("pp") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert dims.groups("dp_replicate") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert dims.coords(5) == {"pp": 1, "dp_replicate": 1, "dp_shard": 0, "tp": 0}


def test_groups_put_replicas_on_neighbouring_ranks_if_spread() -> None:
    dims = ParallelDims(world_size=8, pp=4, placement="spread")
    assert dims.groups("pp") == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert dims.groups("dp_replicate") == [[0, 1], [2, 3], [4, 5], [6, 7]]


def test_coords_nest_shards_inside_replicas() -> None:
    dims = ParallelDims(world_size=8, pp=2, dp_replicate=2, dp_shard=2, placement="PDT")
    assert [(c["pp"], c["dp_replicate"], c["dp_shard"]) for c in map(dims.coords, range(8))] == [
        (p, r, s) for p in range(2) for r in range(2) for s in range(2)
    ]
    with pytest.raises(ValueError, match="rank 8 is outside the world of 8 ranks"):
        dims.coords(8)
    with pytest.raises(ValueError, match=re.escape("no mesh dimension 'dp'; the dimensions")):
        dims.groups("dp")
