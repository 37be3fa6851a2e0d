"""The data-parallel replicas checked: their parameters fingerprinted and compared.

Every ``TENTER_REPLICA_CHECK_EVERY`` steps (default :data:`DEFAULT_EVERY`) of a DDP module
(counted by :mod:`tenter.runtime.steps`, no code in the script), before every checkpoint the
:class:`~tenter.checkpoint.Checkpointer` writes of a replicated or HSDP model (there, each
shard across the replicate dimension: :func:`replicas_of`), and after every resume, each
replica fingerprints its parameters and the replicas all-gather the fingerprints. A
fingerprint is one number per parameter: the wrapping sum of its bytes read as integers
(int64, or the widest its size divides), so that one flipped bit anywhere changes it by a
power of two; one pass over the parameters, on their device, no copy.

A replica that differs from the most of them (ties: from rank 0's side) is named with the
step and the first parameter that differs, in an event (``replicas_diverged``), on the
console, and, with ``TENTER_REPLICA_CHECK=stop`` (the default), by :class:`ReplicasDiverged`
raised on every rank at once: the job stops before the next checkpoint is written.
``warn`` only says so; ``off`` checks nothing. Agreements are events too
(``replicas_agreed``): ``summary.json``'s ``replicas`` lists the steps they were checked at.
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from collections.abc import Iterable

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel

from tenter.jobdir.events import EventKind, record_event

DEFAULT_EVERY = 100
"""Steps between checks: one pass over the parameters, well under 0.5 % of 100 steps."""
MODES = ("stop", "warn", "off")

_WIDEST_FIRST = ((8, torch.int64), (4, torch.int32), (2, torch.int16), (1, torch.int8))
"""Integers to read a parameter's bytes as: the widest that its size divides (int64 sums run
about 3 times faster than int32 ones on a CPU, and wrap as exactly)."""

_compared_at: int | None = None
"""The step this process last compared at: a save's check and the step counter's at the same
step make one comparison."""


class ReplicasDiverged(RuntimeError):
    """The data-parallel replicas no longer hold the same parameters."""


def fingerprint(params: Iterable[torch.Tensor]) -> torch.Tensor:
    """One int64 per parameter: the sum of its bytes read as integers (wrapping)."""
    sums = []
    for param in params:
        local = param.to_local() if isinstance(param, DTensor) else param  # HSDP: this shard
        raw = local.detach().reshape(-1).view(torch.uint8)
        integer = next(dtype for size, dtype in _WIDEST_FIRST if raw.numel() % size == 0)
        sums.append(raw.view(integer).sum(dtype=torch.int64))
    if not sums:
        return torch.zeros(0, dtype=torch.int64)
    return torch.stack(sums)


def replicas_of(model: nn.Module, sharded: bool) -> ReplicaCheck | None:
    """The check of ``model``'s replicas: a DDP module's across its process group; a sharded
    model's (DTensor parameters, as after ``fully_shard``) across the mesh dimension that
    replicates every parameter (HSDP's), each rank comparing its own shard; None where no two
    ranks are known to hold the same parameters (a plain module, which a script may keep
    different on each rank; FSDP over a single dimension, FSDP1, a pipeline)."""
    if isinstance(model, DistributedDataParallel):  # named as the script names them
        return ReplicaCheck(model.module, model.process_group)
    if not sharded:
        return None
    found = _replicate_dim(list(model.parameters()))
    return None if found is None else ReplicaCheck(model, found[0].get_group(found[1]))


def _replicate_dim(params: list[nn.Parameter]) -> tuple[DeviceMesh, int] | None:
    """The mesh and the dimension on which every parameter is a DTensor replicated."""
    if not params or not all(isinstance(p, DTensor) for p in params):
        return None
    mesh: DeviceMesh = params[0].device_mesh  # type: ignore[attr-defined]
    for dim in range(mesh.ndim):
        if all(p.placements[dim].is_replicate() for p in params):  # type: ignore[attr-defined]
            return mesh, dim
    return None


def divergent(rows: list[list[int]]) -> list[int]:
    """The ranks (indices of ``rows``) whose fingerprints differ from the most common ones;
    between equally many, rank 0's side is taken as right."""
    counts = Counter(tuple(row) for row in rows)
    right = max(counts, key=lambda row: (counts[row], row == tuple(rows[0])))
    return [rank for rank, row in enumerate(rows) if tuple(row) != right]


def mode() -> str:
    """``TENTER_REPLICA_CHECK``: stop (default), warn or off."""
    value = os.environ.get("TENTER_REPLICA_CHECK", "stop")
    if value not in MODES:
        raise ValueError(f"TENTER_REPLICA_CHECK={value!r}: use one of {', '.join(MODES)}")
    return value


def interval() -> int:
    """``TENTER_REPLICA_CHECK_EVERY``: steps between checks (default :data:`DEFAULT_EVERY`)."""
    value = os.environ.get("TENTER_REPLICA_CHECK_EVERY", str(DEFAULT_EVERY))
    if not value.isdigit() or int(value) < 1:
        raise ValueError(
            f"TENTER_REPLICA_CHECK_EVERY={value!r}: use a whole number of steps, at least 1"
        )
    return int(value)


class ReplicaCheck:
    """Compares the replicas of ``module`` across ``group`` (default: the whole world)."""

    def __init__(self, module: torch.nn.Module, group: dist.ProcessGroup | None = None) -> None:
        self.module = module
        self.group = group
        self.mode = mode()
        self.every = interval()

    def maybe(self, step: int) -> None:
        """Check at every ``every``-th step (unless just checked)."""
        if step % self.every == 0 and step != _compared_at:
            self.check(step)

    def check(self, step: int) -> list[int]:
        """Compare the replicas now (collective over the group); the divergent ranks."""
        global _compared_at
        if self.mode == "off" or not (dist.is_available() and dist.is_initialized()):
            return []
        _compared_at = step
        named = list(self.module.named_parameters())
        local = fingerprint(p for _, p in named)
        gathered = [torch.empty_like(local) for _ in range(dist.get_world_size(self.group))]
        dist.all_gather(gathered, local, group=self.group)
        rows = [t.tolist() for t in gathered]
        bad = divergent(rows)
        if not bad:
            self._record(EventKind.REPLICAS_AGREED, step=step, replicas=len(rows))
            return []
        right = rows[next(r for r in range(len(rows)) if r not in bad)]
        diff = (name for (name, _), a, b in zip(named, right, rows[bad[0]], strict=True) if a != b)
        ranks = [self._global(r) for r in bad]
        text = (
            f"replicas diverged at step {step}: rank{'s' if len(ranks) > 1 else ''} "
            f"{', '.join(map(str, ranks))} of {len(rows)} replicas hold other parameters "
            f"(first: {next(diff)}): silent data corruption, or an update that differs by rank"
        )
        if self._record(EventKind.REPLICAS_DIVERGED, step=step, ranks=ranks, text=text):
            print(f"tenter: {text}", file=sys.stderr, flush=True)
        if self.mode == "stop":
            raise ReplicasDiverged(
                f"{text}; stopped before the next checkpoint (TENTER_REPLICA_CHECK=warn: only "
                "say so)"
            )
        return ranks

    def _global(self, group_rank: int) -> int:
        return dist.get_global_rank(self.group, group_rank) if self.group else group_rank

    def _record(self, kind: EventKind, **fields: object) -> bool:
        """The event, from the group's first rank (whether this rank is it)."""
        if dist.get_rank() != self._global(0):
            return False
        job_dir = os.environ.get("TENTER_JOB_DIR")
        if job_dir:
            record_event(job_dir, kind, host=os.environ.get("TENTER_HOST", ""), **fields)
        return True
