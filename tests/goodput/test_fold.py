"""The launcher's ledger pass folds each rank's new steps into its walk so far
(:mod:`tenter.goodput.fold`): at every pass, the same time lines as reckoning every step."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from tenter.goodput.fold import RunFold
from tenter.goodput.ledger import HANG, RESTART, Fault, RunRecords, run_timelines

# A rank's reports, each (seconds since the one before, how its step number moves: +1, a
# stride of 3, or back to an earlier step as a resumed attempt does).
reports_of = st.lists(
    st.tuples(st.floats(0.01, 2.0), st.sampled_from([1, 1, 1, 3, -4])), min_size=1, max_size=40
)


@settings(max_examples=60, deadline=None)
@given(
    ranks=st.lists(reports_of, min_size=1, max_size=3),
    fault_times=st.lists(st.tuples(st.floats(1.0, 40.0), st.booleans()), max_size=3),
    save_every=st.integers(2, 9),
    passes=st.integers(1, 6),
    done_before=st.one_of(st.none(), st.integers(0, 10)),
    end=st.sampled_from(["failed", "preempted", "hang", "interrupted"]),
)
def test_a_folded_pass_gives_every_steps_time_lines(
    ranks: list[list[tuple[float, int]]],
    fault_times: list[tuple[float, bool]],
    save_every: int,
    passes: int,
    done_before: int | None,
    end: str,
) -> None:
    steps: dict[int, list[tuple[float, int]]] = {}
    saves: dict[int, list[tuple[float, float]]] = {}
    every: dict[int, list[tuple[float, int]]] = {}
    for rank, moves in enumerate(ranks):
        t, step, every[rank], saves[rank] = 1.0, 0, [], []
        for i, (dt, move) in enumerate(moves):
            t, step = t + dt, max(1, step + move)
            every[rank].append((t, step))
            if i % save_every == save_every - 1:
                saves[rank].append((t, t + dt / 2))
                t += dt / 2
        steps[rank] = []
    faults = [Fault(at, HANG if hang else RESTART, frozenset({0})) for at, hang in fault_times]
    run = RunRecords("j", 0.0, None, "running", steps, saves, faults)
    fold = RunFold(done_before)
    for k in range(1, passes + 1):
        for rank, reports in every.items():  # the reader appends to the same lists
            steps[rank].extend(reports[len(steps[rank]) : len(reports) * k // passes])
        now = max(r[-1][0] for r in every.values()) * k / passes + 0.5
        assert fold.timelines(run, now) == run_timelines(run, now, done_before)
    last = dataclasses.replace(run, end=now + 1, state=end, unsaved=end == "interrupted")
    assert fold.timelines(last, now + 1) == run_timelines(last, now + 1, done_before)
