"""nccl-tests' ``-J`` JSON results file: written as nccl-tests writes it, and read back
(with tenter's own older ``--json`` files) for ``tenter perf compare``.

The layout is nccl-tests' ``src/util.cu`` (JSON_FILE_VERSION 3): ``version``,
``start_time``, ``args``, ``env``, ``nccl_version``, ``config`` (with ``devices``),
``results`` (one record per row: ``root`` is the printed ``%6i`` string; each half has
``time`` or ``cpu_time``, ``alg_bw``, ``bus_bw``, ``nwrong`` as a number or null, and with
``-I 1`` an ``*_per_iter`` record; then ``actual_iterations`` and ``experiment_name``),
``out_of_bounds``, ``average_bus_bandwidth``, ``errors`` and ``end_time``. Its booleans
are the strings ``"true"``/``"false"``, as nccl-tests' ``jsonBool`` writes them.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tenter.perf.options import PerfOptions
from tenter.perf.parse import Log, LogRow, Measurement, parse_log
from tenter.perf.report import DeviceInfo, Half, Row, avg_busbw, bandwidth_ok, out_of_bounds

VERSION = 3
"""nccl-tests' JSON_FILE_VERSION."""


def _bool(value: bool) -> str:
    return "true" if value else "false"


def open_exclusive(path: str) -> tuple[IO[str], str] | None:
    """Create ``path``, or ``path.0``, ``path.1``... if taken, as nccl-tests does (it never
    overwrites a results file). None: the directory cannot be written."""
    candidate, attempt = path, 0
    while True:
        try:
            # Kept open until the results are in, so that no other run takes the name.
            return open(candidate, "x"), candidate
        except FileExistsError:
            candidate, attempt = f"{path}.{attempt}", attempt + 1
        except OSError:
            return None


@dataclass(frozen=True)
class RunInfo:
    """What the file records beside the rows."""

    args: list[str]
    env: dict[str, str]
    nccl_version: int
    """NCCL_VERSION_CODE of the NCCL torch uses (0 when it has none)."""
    start_time: str
    end_time: str
    devices: list[DeviceInfo]
    errors: list[str]
    min_busbw: float | None = None
    """``NCCL_TESTS_MIN_BW``, when set."""


def document(opts: PerfOptions, info: RunInfo, rows: list[Row]) -> dict[str, Any]:
    """The whole file, in nccl-tests' key order."""
    step = (
        {"step_factor": opts.stepfactor} if opts.stepfactor > 1 else {"step_bytes": opts.stepbytes}
    )
    errors = out_of_bounds(rows)
    gate = bandwidth_ok(rows, info.min_busbw)
    bandwidth_okay = "unchecked" if gate is None else _bool(gate)
    return {
        "version": VERSION,
        "start_time": info.start_time,
        "args": info.args,
        "env": [f"{k}={v}" for k, v in info.env.items()],
        "nccl_version": info.nccl_version,
        "config": {
            "nthreads": 1,
            "ngpus": 1,
            "minimum_bytes": opts.minbytes,
            "maximum_bytes": opts.maxbytes,
            **step,
            "warmup_iters": opts.warmup_iters,
            "iterations": opts.iters,
            "aggregated_iterations": opts.agg_iters,
            "validation": opts.check,
            "graph": 0,
            "blocking_collectives": _bool(opts.blocking != 0),
            "per_iter_timing": _bool(opts.per_iter_timing),
            "per_iter_skip": opts.per_iter_skip,
            "parallel_init": _bool(opts.parallel_init),
            "devices": [
                {
                    "rank": d.rank,
                    "group": 0,
                    "pid": d.pid,
                    "hostname": d.host,
                    "device": d.device,
                    "device_hex": d.bus_id,
                    "device_info": d.name,
                }
                for d in info.devices
            ],
        },
        "results": [_record(r, opts) for r in rows],
        "out_of_bounds": {"count": errors, "okay": _bool(errors == 0)},
        "average_bus_bandwidth": {"bandwidth": avg_busbw(rows), "okay": bandwidth_okay},
        "errors": info.errors,
        "end_time": info.end_time,
    }


def _record(row: Row, opts: PerfOptions) -> dict[str, Any]:
    record: dict[str, Any] = {
        "size": row.size,
        "count": row.count,
        "type": row.type,
        "redop": row.redop,
        "root": f"{row.root:6d}",
    }
    for key, half in (("out_of_place", row.out_of_place), ("in_place", row.in_place)):
        record[key] = {
            "cpu_time" if opts.report_cputime else "time": half.time_us,
            "alg_bw": half.algbw,
            "bus_bw": half.busbw,
            "nwrong": None if half.wrong is None else float(half.wrong),
        }
        if half.per_iter is not None:
            record[f"{key}_per_iter"] = _per_iter(half)
    record["actual_iterations"] = opts.iters
    record["experiment_name"] = ""
    return record


def _per_iter(half: Half) -> dict[str, Any]:
    assert half.per_iter is not None
    it = half.per_iter
    record: dict[str, Any] = {"skipped_iterations": it.skipped, **it.stats}
    record["times_us"] = it.times_us
    if len(it.per_process_us) > 1:  # nccl-tests leaves it out for a single process
        record["per_process_max_times_us"] = it.per_process_us
    return record


def dumps(doc: dict[str, Any]) -> str:
    """Compact, as nccl-tests writes it; NaN as the string ``"nan"``, as it does."""

    def finite(value: Any) -> Any:
        if isinstance(value, float) and value != value:
            return "nan"
        if isinstance(value, dict):
            return {k: finite(v) for k, v in value.items()}
        if isinstance(value, list):
            return [finite(v) for v in value]
        return value

    return json.dumps(finite(doc), separators=(",", ":"))


def read_log(doc: dict[str, Any]) -> Log:
    """A results file (nccl-tests' ``-J`` or tenter's older ``--json``) as a :class:`Log`."""
    program = doc.get("program") or _program(doc.get("args"))
    bandwidth = (doc.get("average_bus_bandwidth") or {}).get("bandwidth")
    bounds = (doc.get("out_of_bounds") or {}).get("count")
    return Log(
        rows=[_row(r) for r in doc.get("results", [])],
        collective=program,
        reported_avg_busbw=float(bandwidth) if isinstance(bandwidth, int | float) else None,
        out_of_bounds=int(bounds) if isinstance(bounds, int) else None,
    )


def _program(args: Any) -> str | None:
    if isinstance(args, list) and args and isinstance(args[0], str):
        return os.path.basename(args[0])
    return None


def _row(record: dict[str, Any]) -> LogRow:
    root = record.get("root")
    return LogRow(
        size=int(record["size"]),
        count=int(record["count"]),
        type=str(record.get("type", "")),
        redop=record.get("redop"),
        root=int(str(root).strip()) if root is not None else None,
        out_of_place=_measurement(record.get("out_of_place")),
        in_place=_measurement(record.get("in_place")),
    )


def _measurement(half: dict[str, Any] | None) -> Measurement | None:
    if not half:
        return None
    time = half["time"] if "time" in half else half["cpu_time"]
    wrong = half.get("nwrong")
    return Measurement(
        time_us=float(time),
        algbw=float(half["alg_bw"]),
        busbw=float(half["bus_bw"]),
        wrong="N/A" if wrong is None else f"{float(wrong):g}",
    )


def read_results(path: Path) -> Log:
    """A benchmark log or results file, whichever ``path`` holds (raises OSError,
    ValueError for a JSON file that is not a results file)."""
    text = path.read_text(errors="replace")
    if not text.lstrip().startswith("{"):  # logs may start with "[1,0]<stdout>:"
        return parse_log(text)
    try:
        doc = json.loads(text)
        return read_log(doc)
    except (AttributeError, KeyError, TypeError, ValueError) as e:  # JSONDecodeError too
        raise ValueError(
            f"{path} is JSON but not an nccl-tests or tenter perf results file ({e})"
        ) from e
