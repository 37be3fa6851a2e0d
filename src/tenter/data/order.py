"""An epoch's samples in one global order, dealt to the ranks from a position in it.

A ``DistributedSampler`` draws one permutation per epoch (``torch.randperm`` seeded with
``seed + epoch``) and deals it round-robin: rank ``r`` of ``R`` takes positions ``r, r + R,
r + 2R, ...``. After every rank has taken ``k`` indices, the world together has consumed
exactly the first ``k * R`` positions of the permutation, whatever ``R``: that count is the
epoch's *global position*. Resumed at another world size, the ranks deal the rest of the
permutation, from that position, the same way, so that no sample of the epoch is skipped or
seen twice, and the global batches keep the uninterrupted run's composition when the global
batch size is unchanged. These are the pure rules; :class:`tenter.checkpoint.ResumableSampler`
applies them.

The tail follows ``DistributedSampler``: with ``drop_last`` the rest is cut to a multiple of
the world size; without it, the rest is padded to one with the epoch's first positions (which
the world has already seen: ``DistributedSampler``'s own padding, at most ``R - 1`` samples).
"""

from __future__ import annotations

from collections.abc import Sequence


def rest_length(size: int, start: int, world: int, drop_last: bool) -> int:
    """How many positions, padding included, the world deals from ``start`` to the epoch's end
    (``size`` positions in all)."""
    rest = max(size - start, 0)
    if drop_last:
        return rest - rest % world
    return rest + (-rest) % world


def share_length(size: int, start: int, world: int, drop_last: bool) -> int:
    """How many indices each rank takes from ``start`` to the epoch's end."""
    return rest_length(size, start, world, drop_last) // world


def share(order: Sequence[int], start: int, world: int, rank: int, drop_last: bool) -> list[int]:
    """Rank ``rank``'s indices, of ``world``, of the rest of the epoch's global ``order`` from
    position ``start``: every ``world``-th from ``start + rank``, the tail cut or padded
    (module doc)."""
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is not in a world of {world}")
    length = rest_length(len(order), start, world, drop_last)
    dealt = list(order[start : start + length])
    while len(dealt) < length:  # padding: the epoch's first positions, again if need be
        dealt += order[: length - len(dealt)]
    return dealt[rank::world]


def position_after(size: int, start: int, world: int, taken: int) -> int:
    """The global position once every rank has taken ``taken`` indices from ``start``
    (padding counts up to the epoch's end, ``size``)."""
    return min(start + taken * world, size)


def step_length(size: int, start: int, batch: int, participants: int) -> int:
    """How many positions a step of ``participants`` replicas of ``batch`` samples each takes
    from ``start`` (torchft's committed steps, :class:`tenter.runtime.ft.SampleDealer`): their
    global batch, or the epoch's rest where shorter (the epoch then ends with this step)."""
    return max(min(batch * participants, size - start), 0)


def step_share(start: int, length: int, participants: int, rank: int) -> range:
    """Participant ``rank``'s positions of a step of ``length`` positions from ``start``: the
    ``rank``-th of ``participants`` contiguous near-equal chunks (each ``batch`` samples but in
    an epoch's shorter last step; empty only where that step has fewer samples than
    participants)."""
    if not 0 <= rank < participants:
        raise ValueError(f"participant {rank} is not among {participants}")
    return range(start + rank * length // participants, start + (rank + 1) * length // participants)
