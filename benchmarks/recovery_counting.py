"""What benchmarks/recovery.py counts from rank 0's steps, as pure functions (tested in
tests/benchmarks/test_recovery_counting.py): where the recovery ends, and the steps it lost.

``steps`` are rank 0's completed steps as ``(seconds since the fault, step)``, in the order
they were done.
"""

from __future__ import annotations

from itertools import pairwise

Step = tuple[float, int]


def first_recovered(last: Step, after: list[Step]) -> Step:
    """The first step of the recovery. A restart goes back to the checkpoint's step: the first
    step done again (rank 0 may finish the step it was in after the fault first). Without a
    step done again (torchft: the others never roll back), the step that ends the longest
    wait after the fault: a step or two may still commit before the loss is seen."""
    highest = last[1]
    for t, step in after:
        if step <= highest:
            return t, step
        highest = step
    waits = [(later[0] - earlier[0], later) for earlier, later in pairwise([last, *after])]
    return max(waits)[1]


def lost_steps(steps: list[Step], recovered_at: float) -> int:
    """How many steps rank 0 completed before ``recovered_at`` and completed again from then
    on: the work the recovery threw away.

    Counted as the step numbers done on both sides, never as a difference of step numbers: a
    torchft group that heals jumps ahead to its peers' step (it redoes nothing, and skips the
    steps the others did meanwhile), where ``highest before - (first after - 1)`` came out
    negative (-74 for a jump of 75 steps)."""
    before = {step for t, step in steps if t < recovered_at}
    again = {step for t, step in steps if t >= recovered_at}
    return len(before & again)
