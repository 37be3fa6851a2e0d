"""The ledger's pure function: its parts always add up to the wall time, and each kind of
record lands in its part."""

from __future__ import annotations

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tenter.goodput import ledger as ledger_module
from tenter.goodput.ledger import (
    HANG,
    RESTART,
    Fault,
    Ledger,
    RunRecords,
    Segment,
    build_ledger,
    rank_timeline,
    summary_line,
)


def run(
    steps,
    *,
    launch=0.0,
    end=None,
    state="succeeded",
    checkpoints=None,
    faults=(),
    job_id="j",
    unsaved=False,
):
    return RunRecords(
        job_id=job_id,
        launch=launch,
        end=end,
        state=state,
        steps=steps,
        checkpoints=checkpoints or {},
        faults=list(faults),
        unsaved=unsaved,
    )


def test_build_ledger_splits_startup_steps_and_teardown_if_clean_run():
    steps = {0: [(2.0, 1), (3.0, 2), (4.0, 3)], 1: [(3.0, 1), (4.0, 2), (5.0, 3)]}
    ledger = build_ledger([run(steps, end=6.0)], now=100.0)
    # rank 0: startup 2, productive 2, teardown 2; rank 1: startup 3, productive 2, teardown 1
    assert ledger.parts["startup"] == pytest.approx(2.5)
    assert ledger.parts["productive"] == pytest.approx(2.0)
    assert ledger.parts["teardown"] == pytest.approx(1.5)
    assert ledger.wall_s == 6.0
    assert ledger.goodput == pytest.approx(2 / 6)
    assert (ledger.productive_steps, ledger.lost_steps, ledger.ranks) == (3, 0, 2)


def test_build_ledger_counts_recomputed_steps_as_lost_if_resumed_from_checkpoint():
    # steps 1..5, a restart at 5.5, resumed from the checkpoint of step 3: 4 and 5 again.
    reports = [(1.0, 1), (2.0, 2), (3.0, 3), (4.0, 4), (5.0, 5)]
    reports += [(8.0, 4), (9.0, 5), (10.0, 6)]
    faults = [Fault(5.5, RESTART, frozenset({0}))]
    ledger = build_ledger([run({0: reports}, end=10.0, faults=faults)], now=10.0)
    assert ledger.parts["fault"] == pytest.approx(3.0)  # 5.0 .. 8.0 (step 4's first redo)
    assert ledger.parts["lost"] == pytest.approx(1.0)  # step 5 again
    assert ledger.parts["productive"] == pytest.approx(5.0)  # steps 2-5, then 6
    assert ledger.lost_steps == 2
    assert ledger.productive_steps == 6


def test_build_ledger_counts_steps_since_last_checkpoint_lost_if_preempted_without_one():
    # steps 1..6, a checkpoint saved 3.2 .. 3.5 (after step 3), preempted with no final one.
    reports = [(1.0, 1), (2.0, 2), (3.0, 3), (4.0, 4), (5.0, 5), (6.0, 6)]
    records = {"end": 7.0, "state": "interrupted", "checkpoints": {0: [(3.2, 3.5)]}}
    kept = build_ledger([run({0: reports}, **records)], now=7.0)
    assert (kept.productive_steps, kept.lost_steps) == (6, 0)  # a Ctrl-C: nothing said
    ledger = build_ledger([run({0: reports}, unsaved=True, **records)], now=7.0)
    assert (ledger.productive_steps, ledger.lost_steps) == (3, 3)
    assert ledger.parts["lost"] == pytest.approx(2.5)  # 3.5 .. 6.0
    assert ledger.parts["productive"] == pytest.approx(2.2)  # 1.0 .. 3.2
    assert sum(ledger.parts.values()) == pytest.approx(ledger.wall_s)
    none_saved = build_ledger([run({0: reports}, end=7.0, unsaved=True)], now=7.0)
    assert (none_saved.productive_steps, none_saved.lost_steps) == (0, 6)
    assert none_saved.parts["productive"] == 0


def test_build_ledger_marks_checkpoint_saves_inside_steps():
    steps = {0: [(1.0, 1), (3.0, 2), (4.0, 3)]}
    ledger = build_ledger([run(steps, end=4.0, checkpoints={0: [(1.5, 2.5)]})], now=9.0)
    assert ledger.parts["checkpoint"] == pytest.approx(1.0)
    assert ledger.parts["productive"] == pytest.approx(2.0)


def test_build_ledger_splits_hang_then_recovery_if_hang_restarted():
    steps = {0: [(1.0, 1), (2.0, 2), (12.0, 1), (13.0, 2)]}
    faults = [Fault(7.0, HANG)]
    ledger = build_ledger([run(steps, end=13.0, faults=faults)], now=13.0)
    assert ledger.parts["hang"] == pytest.approx(5.0)
    assert ledger.parts["fault"] == pytest.approx(5.0)
    assert ledger.parts["lost"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("state", "part"),
    [("hang", "hang"), ("preempted", "preemption"), ("failed", "fault"), ("succeeded", "teardown")],
)
def test_build_ledger_names_the_end_by_state(state, part):
    ledger = build_ledger([run({0: [(1.0, 1), (2.0, 2)]}, end=5.0, state=state)], now=9.0)
    assert ledger.parts[part] == pytest.approx(3.0)


def test_build_ledger_continues_across_preempted_run_and_resume():
    first = run({0: [(1.0, 1), (2.0, 2), (3.0, 3)]}, end=4.0, state="preempted", job_id="a")
    # resumed from the checkpoint of step 2: step 3 again, then 4
    second = run({0: [(12.0, 3), (13.0, 4)]}, launch=10.0, end=14.0, job_id="b")
    ledger = build_ledger([first, second], now=20.0)
    assert ledger.wall_s == 14.0
    assert ledger.parts["preemption"] == pytest.approx(1.0 + 6.0)  # its end, then the wait
    assert ledger.parts["startup"] == pytest.approx(1.0 + 2.0)
    assert ledger.lost_steps == 1
    assert ledger.runs == ["a", "b"]


def test_build_ledger_counts_running_job_until_now():
    ledger = build_ledger([run({0: [(1.0, 1)]}, end=None, state="running")], now=3.0)
    assert ledger.wall_s == 3.0
    assert ledger.parts["productive"] == pytest.approx(2.0)  # the step it computes


def test_build_ledger_is_all_startup_if_no_rank_reported():
    ledger = build_ledger([run({}, end=5.0)], now=9.0)
    assert ledger.parts["startup"] == 5.0
    assert ledger.ranks == 0
    assert "no rank reported" in summary_line(ledger)


def test_ledger_round_trips_through_its_dict():
    ledger = build_ledger([run({0: [(1.0, 1), (2.0, 2)]}, end=3.0)], now=3.0)
    assert Ledger.from_dict(ledger.to_dict()) == ledger


# -- the property: whatever the records, the parts add up to the wall time -----------------

times = st.floats(min_value=0.0, max_value=1000.0, allow_nan=False)


@st.composite
def runs(draw):
    count = draw(st.integers(1, 3))
    out, launch = [], 0.0
    for i in range(count):
        launch += draw(times)
        end = launch + draw(times)
        ranks = draw(st.integers(0, 3))
        steps = {
            r: [
                (draw(st.floats(launch - 5, end + 5)), draw(st.integers(0, 30)))
                for _ in range(draw(st.integers(0, 12)))
            ]
            for r in range(ranks)
        }
        saves = {
            r: [(a, a + draw(st.floats(0, 20))) for a in draw(st.lists(times, max_size=3))]
            for r in range(ranks)
        }
        kinds = st.sampled_from([HANG, RESTART, "replica_healed"])
        faults = [
            Fault(
                draw(st.floats(launch, end)), draw(kinds), draw(st.none() | st.just(frozenset({0})))
            )
            for _ in range(draw(st.integers(0, 3)))
        ]
        last = i == count - 1
        state = draw(st.sampled_from(["succeeded", "failed", "hang", "preempted", "max_run"]))
        out.append(
            run(
                steps,
                launch=launch,
                end=None if last and draw(st.booleans()) else end,
                state="preempted" if not last else state,
                checkpoints=saves,
                faults=faults,
                job_id=str(i),
            )
        )
        launch = end
    return out


@settings(max_examples=150, deadline=None)
@given(runs(), st.floats(0, 5000))
def test_build_ledger_parts_add_up_to_wall_time(records, now):
    ledger = build_ledger(records, now)
    assert all(seconds >= -1e-9 for seconds in ledger.parts.values())
    assert math.isclose(sum(ledger.parts.values()), ledger.wall_s, rel_tol=1e-9, abs_tol=1e-6)
    assert 0.0 <= ledger.goodput <= 1.0 + 1e-9


def test_build_ledger_counts_a_run_stopped_for_a_hang_as_hang_to_its_end():
    steps = {0: [(1.0, 1), (2.0, 2)]}
    ledger = build_ledger([run(steps, end=9.0, state="hang", faults=[Fault(6.0, HANG)])], 9.0)
    assert ledger.parts["hang"] == pytest.approx(7.0)
    assert ledger.parts["fault"] == 0.0


# -- the sweep agrees with the ledger's first algorithm: report by report, save by save --------


def reference_timeline(run, rank, until, done_before):
    """(seconds per part, productive steps, lost steps, highest step), as the ledger's first,
    quadratic algorithm reckoned them."""
    faults = sorted((f for f in run.faults if f.hits(rank)), key=lambda f: f.time)
    reports = sorted(
        ((t, s) for t, s in run.steps.get(rank, ()) if run.launch <= t <= until),
        key=lambda r: r[0],
    )
    segments, cursor, previous, highest, redo = [], run.launch, None, done_before, done_before
    productive = lost = 0
    for time, step in reports:
        in_gap = [f for f in faults if cursor < f.time <= time]
        resumed = previous is not None and (step <= previous or bool(in_gap))
        if previous is None:
            segments.append(Segment(cursor, time, "startup"))
        elif resumed:
            redo = highest
            segments += ledger_module._split_gap(cursor, time, in_gap)
        else:
            again = redo is not None and step <= redo
            segments.append(Segment(cursor, time, "lost" if again else "productive"))
        first = 0 if previous is None and done_before is None else step - 1
        since = step - (previous if previous is not None and not resumed else first)
        again_steps = 0 if redo is None else min(max(redo - (step - since), 0), since)
        lost, productive = lost + again_steps, productive + since - again_steps
        previous, cursor = step, time
        highest = step if highest is None else max(highest, step)
    segments += ledger_module._tail(run, rank, cursor, until, previous is not None, faults)
    saves = run.checkpoints.get(rank, ())
    if run.unsaved:
        saved = max((end for _, end in saves), default=run.launch)
        moved = min(sum(1 for t, _ in reports if t > saved), productive)
        segments = ledger_module._lost_after(segments, saved)
        productive, lost = productive - moved, lost + moved
    for start, end in sorted(saves):
        carved = []
        for s in segments:
            lo, hi = max(s.start, start), min(s.end, end)
            if lo >= hi or s.part == "checkpoint":
                carved.append(s)
                continue
            carved += [Segment(s.start, lo, s.part), Segment(lo, hi, "checkpoint")]
            carved.append(Segment(hi, s.end, s.part))
        segments = carved
    return _seconds(segments), productive, lost, highest


def _seconds(segments):
    parts = dict.fromkeys(ledger_module.PARTS, 0.0)
    for s in segments:
        parts[s.part] += s.end - s.start
    return parts


@settings(max_examples=300, deadline=None)
@given(runs(), st.floats(0, 5000), st.none() | st.integers(0, 30), st.booleans())
def test_the_sweep_reckons_as_the_first_algorithm(records, now, done_before, unsaved):
    record = dataclasses.replace(records[-1], unsaved=unsaved)
    until = ledger_module.run_end(record, now)
    for rank in record.steps:
        line = rank_timeline(record, rank, until, done_before)
        seconds, productive, lost, highest = reference_timeline(record, rank, until, done_before)
        counts = (line.productive_steps, line.lost_steps, line.max_step)
        assert counts == (productive, lost, highest)
        for part, expected in _seconds(line.segments).items():
            assert math.isclose(seconds[part], expected, abs_tol=1e-6), part
