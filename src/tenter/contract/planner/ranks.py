"""The ranks of a plan's hosts, and torch's variables that every rank shares (kept once)."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping

from tenter.contract.plan import RankPlan, rank_plans
from tenter.contract.planner.hosts import Placements


def host_ranks(place: Placements, procs: int, per_group: int, index: int) -> list[RankPlan]:
    """Host ``index``'s ranks, with every torch variable (before :func:`common_rank_env`)."""
    group, group_index = divmod(index, per_group)
    job_id = place.job_id
    return rank_plans(
        job_dir=str(place.job_dir),
        first_rank=index * procs,
        group_index=group_index,
        procs=procs,
        per_group=per_group,
        master_addr=place.where.addrs[group * per_group],
        run_id=f"{job_id}-group-{group}" if place.spec.fault_tolerance else job_id,
        max_restarts=place.spec.elastic.max_restarts,
    )


def common_rank_env(ranks: list[RankPlan]) -> dict[str, str]:
    """torch's variables equal on every rank (``WORLD_SIZE``, ``MASTER_ADDR``...): kept once."""
    envs = [rank.env for rank in ranks]
    return dict(functools.reduce(lambda a, b: a & b.items(), envs[1:], set(envs[0].items())))


def without(ranks: list[RankPlan], common: Mapping[str, str]) -> list[RankPlan]:
    """``ranks`` less the variables that ``common`` holds for all of them."""
    return [
        dataclasses.replace(r, env={k: v for k, v in r.env.items() if k not in common})
        for r in ranks
    ]
