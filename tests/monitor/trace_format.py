"""A check of the Chrome Trace Event Format (the subset Perfetto and chrome://tracing need to
draw a trace): what each event kind must carry, and slices on one track that nest."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

PHASES = {"X", "B", "E", "i", "I", "M", "C"}
METADATA = {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}


def trace_problems(trace: Any) -> list[str]:
    """What breaks the format in ``trace`` (a JSON object's value): none where it is valid."""
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        return ["not an object with a traceEvents list"]
    problems = [p for i, e in enumerate(trace["traceEvents"]) for p in _event_problems(i, e)]
    return problems or _nesting_problems(trace["traceEvents"])


def _event_problems(i: int, event: Any) -> list[str]:
    if not isinstance(event, dict):
        return [f"event {i}: not an object"]
    out = []
    ph = event.get("ph")
    if ph not in PHASES:
        out.append(f"event {i}: ph {ph!r} is none of {sorted(PHASES)}")
    if not isinstance(event.get("name"), str) or not event["name"]:
        out.append(f"event {i}: no name")
    for key in ("pid", "tid"):
        if not isinstance(event.get(key), int):
            out.append(f"event {i}: {key} is not an integer")
    if ph == "M":
        if event.get("name") not in METADATA or "name" not in event.get("args", {}):
            out.append(f"event {i}: metadata without a known name and args.name")
        return out
    if not isinstance(event.get("ts"), int | float) or event["ts"] < 0:
        out.append(f"event {i}: ts is not a number >= 0")
    if ph == "X" and (not isinstance(event.get("dur"), int | float) or event["dur"] < 0):
        out.append(f"event {i}: a complete event without a duration >= 0")
    if ph != "X" and "dur" in event:
        out.append(f"event {i}: dur on a {ph!r} event")
    if ph in {"i", "I"} and event.get("s", "t") not in {"g", "p", "t"}:
        out.append(f"event {i}: instant scope {event.get('s')!r} is none of g, p, t")
    if "args" in event and not isinstance(event["args"], dict):
        out.append(f"event {i}: args is not an object")
    return out


def _nesting_problems(events: list[dict[str, Any]]) -> list[str]:
    """Complete events on one track must nest: one ends before the next begins, or holds it."""
    tracks: dict[tuple[int, int], list[tuple[float, float, str]]] = defaultdict(list)
    for e in events:
        if e["ph"] == "X":
            tracks[e["pid"], e["tid"]].append((e["ts"], -(e["ts"] + e["dur"]), e["name"]))
    out = []
    for track, spans in tracks.items():
        open_ends: list[tuple[float, str]] = []
        for start, neg_end, name in sorted(spans):
            while open_ends and open_ends[-1][0] <= start:
                open_ends.pop()
            if open_ends and -neg_end > open_ends[-1][0]:
                out.append(f"track {track}: {name} overlaps {open_ends[-1][1]} without nesting")
            open_ends.append((-neg_end, name))
    return out
