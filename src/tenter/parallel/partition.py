"""Splitting a chain of blocks into contiguous pipeline stages: pure functions, no torch.

A pipeline runs as fast as its slowest stage, so :func:`balance` minimises the heaviest stage's
cost over all contiguous splits (dynamic programming, O(stages x blocks^2)), optionally under a
per-stage memory cap. The cost of a block is what the caller measured: forward+backward time,
parameter count, or :func:`blend` of the two (SageMaker's ``memory_weight``).

With ``virtual_stages`` v > 1 (interleaved schedules) the chain is split into pp x v stages and
pipeline rank r runs stages r, r + pp, r + 2 pp, ... (:func:`stages_of_rank`), the loop order
torch's ``ScheduleInterleaved1F1B`` expects.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass


def balance(
    costs: Sequence[float],
    num_stages: int,
    *,
    memory: Sequence[float] | None = None,
    memory_cap: float | None = None,
) -> list[int]:
    """The sizes (blocks per stage) of the contiguous split of ``costs`` into ``num_stages``
    non-empty stages whose heaviest stage is lightest; every stage's ``memory`` sum stays at
    or under ``memory_cap``. Ties are broken the same way every time (each stage's end as
    early as possible from the last stage back), so every rank given the same costs computes
    the same split."""
    n = len(costs)
    if num_stages < 1:
        raise ValueError(f"num_stages ({num_stages}) must be at least 1")
    if n < num_stages:
        raise ValueError(
            f"{n} blocks cannot fill {num_stages} pipeline stages (each needs at least one "
            "block): lower pipeline_parallel_degree x virtual_stages or split the model finer"
        )
    if any(c < 0 for c in costs):
        raise ValueError(f"block costs must be non-negative, got {list(costs)}")
    if memory_cap is not None and memory is None:
        raise ValueError("memory_cap needs the per-block memory to check it against")
    mem = list(memory) if memory is not None else [0.0] * n
    if len(mem) != n:
        raise ValueError(f"memory has {len(mem)} entries for {n} blocks")
    cap = float("inf") if memory_cap is None else memory_cap
    cost_sum = [0.0, *itertools.accumulate(costs)]
    mem_sum = [0.0, *itertools.accumulate(mem)]
    inf = float("inf")
    # best[k][i]: the lightest heaviest-stage of the first i blocks in k stages; cut[k][i]:
    # where its last stage starts.
    best = [[inf] * (n + 1) for _ in range(num_stages + 1)]
    cut = [[0] * (n + 1) for _ in range(num_stages + 1)]
    best[0][0] = 0.0
    for k in range(1, num_stages + 1):
        for i in range(k, n - (num_stages - k) + 1):
            for s in range(k - 1, i):
                if mem_sum[i] - mem_sum[s] > cap or best[k - 1][s] == inf:
                    continue
                heaviest = max(best[k - 1][s], cost_sum[i] - cost_sum[s])
                if heaviest < best[k][i]:
                    best[k][i], cut[k][i] = heaviest, s
    if best[num_stages][n] == inf:
        raise ValueError(
            f"no split of {n} blocks into {num_stages} stages keeps every stage's memory "
            f"within memory_cap={memory_cap:g} (the largest block needs {max(mem):g}, the "
            f"total is {mem_sum[n]:g}): raise memory_cap or pipeline_parallel_degree"
        )
    sizes = []
    i = n
    for k in range(num_stages, 0, -1):
        sizes.append(i - cut[k][i])
        i = cut[k][i]
    return sizes[::-1]


def check_sizes(sizes: Sequence[int], num_blocks: int, num_stages: int) -> list[int]:
    """An explicit ``partition=[...]`` (blocks per stage), checked against the model."""
    sizes = list(sizes)
    if len(sizes) != num_stages:
        raise ValueError(
            f"partition={sizes} has {len(sizes)} stages but the pipeline has {num_stages} "
            "(pipeline_parallel_degree x virtual_stages): give one size per stage"
        )
    if any(s < 1 for s in sizes):
        raise ValueError(f"partition={sizes}: every stage needs at least one block")
    if sum(sizes) != num_blocks:
        raise ValueError(
            f"partition={sizes} covers {sum(sizes)} blocks but the model has {num_blocks}: "
            "the sizes must add up to the number of blocks"
        )
    return sizes


def blend(times: Sequence[float], params: Sequence[float], memory_weight: float) -> list[float]:
    """SageMaker's auto-partition objective: each block's share of the total time and of the
    total parameters, weighted ``1 - memory_weight`` and ``memory_weight``."""
    if not 0.0 <= memory_weight <= 1.0:
        raise ValueError(f"memory_weight ({memory_weight}) must be between 0.0 and 1.0")
    total_t = sum(times) or 1.0
    total_p = sum(params) or 1.0
    return [
        (1.0 - memory_weight) * t / total_t + memory_weight * p / total_p
        for t, p in zip(times, params, strict=True)
    ]


def stages_of_rank(pp_rank: int, pp: int, virtual_stages: int) -> list[int]:
    """The stage indices pipeline rank ``pp_rank`` runs (loop order: r, r + pp, ...)."""
    if not 0 <= pp_rank < pp:
        raise ValueError(f"pp_rank {pp_rank} is outside the pipeline of {pp} ranks")
    return [pp_rank + v * pp for v in range(virtual_stages)]


@dataclass(frozen=True)
class Partition:
    """A split of named blocks into stages, with what each stage weighs."""

    names: list[str]
    sizes: list[int]
    params: list[int]
    """Parameters per block."""
    times: list[float] | None = None
    """Measured forward+backward seconds per block, when measured."""
    pp: int = 1

    def bounds(self, stage: int) -> tuple[int, int]:
        start = sum(self.sizes[:stage])
        return start, start + self.sizes[stage]

    def stage_names(self, stage: int) -> list[str]:
        lo, hi = self.bounds(stage)
        return self.names[lo:hi]

    def stage_params(self, stage: int) -> int:
        lo, hi = self.bounds(stage)
        return sum(self.params[lo:hi])

    def stage_time(self, stage: int) -> float | None:
        if self.times is None:
            return None
        lo, hi = self.bounds(stage)
        return sum(self.times[lo:hi])

    def describe(self) -> str:
        """One line per stage: its rank, blocks, parameters and estimated time."""
        rows = [("stage", "pp rank", "blocks", "parameters", "est. fwd+bwd")]
        for s in range(len(self.sizes)):
            names = self.stage_names(s)
            blocks = names[0] if len(names) == 1 else f"{names[0]} .. {names[-1]} ({len(names)})"
            t = self.stage_time(s)
            rows.append(
                (
                    str(s),
                    str(s % self.pp),
                    blocks,
                    f"{self.stage_params(s):,}",
                    "-" if t is None else f"{t * 1e3:.2f} ms",
                )
            )
        widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
        lines = ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)) for r in rows]
        times = [self.stage_time(s) for s in range(len(self.sizes))]
        if all(t is not None for t in times):
            known = [t for t in times if t is not None]
            mean = sum(known) / len(known)
            lines.append(f"heaviest stage / mean stage (est.): {max(known) / mean:.2f}")
        return "\n".join(line.rstrip() for line in lines)
