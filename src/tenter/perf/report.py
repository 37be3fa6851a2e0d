"""nccl-tests' output layout, reproduced: the ``#`` preamble, the two-level header, one row
per size, and the footer (nccl-tests' ``src/util.cu``). Pure functions of the results."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Half:
    """The out-of-place or in-place half of a row."""

    time_us: float
    algbw: float
    """GB/s (10**9 bytes per second)."""
    busbw: float
    wrong: int | None
    """Wrong elements summed over ranks; None: not checked (printed N/A)."""


@dataclass(frozen=True)
class Row:
    size: int
    """Bytes: the larger of the send and receive buffers."""
    count: int
    type: str
    redop: str
    root: int
    out_of_place: Half
    in_place: Half


@dataclass(frozen=True)
class DeviceInfo:
    """One rank's line of ``# Using devices``."""

    rank: int
    pid: int
    host: str
    device: int
    bus_id: str
    name: str
    machine: str
    """The real machine (simulated hosts share one): memory is per machine."""
    free_bytes: int
    """Memory available for buffers on this rank's device (host RAM for the CPU)."""


def float_str(value: float, width: int) -> str:
    """A number in ``width`` columns with as many decimals as fit (nccl-tests' getFloatStr)."""
    power, bound = 0, 1
    while value >= bound:
        power += 1
        bound *= 10
    if power < width - 2:
        return f"{value:{width}.2f}"
    if power < width - 1:
        return f"{value:{width}.1f}"
    if power < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}" if width >= 7 else f"{value:{width}.0e}"


def _g(value: float) -> str:
    """C's ``%g``."""
    return f"{value:g}"


def preamble(
    *,
    program: str,
    version_line: str,
    minbytes: int,
    maxbytes: int,
    stepfactor: int,
    stepbytes: int,
    warmup_iters: int,
    iters: int,
    check: int,
    blocking: bool,
    devices: list[DeviceInfo],
) -> list[str]:
    step = f"{stepfactor}(factor)" if stepfactor > 1 else f"{stepbytes}(bytes)"
    lines = [
        f"# {version_line}",
        f"# Collective test starting: {program}",
        f"# nThread 1 nGpus 1 minBytes {minbytes} maxBytes {maxbytes} step: {step} "
        f"warmup iters: {warmup_iters} iters: {iters} agg iters: 1 validation: {check} "
        "graph: 0",
    ]
    if blocking:
        lines.append("# Blocking Enabled: wait for completion and barrier after each collective ")
    lines += ["#", "# Using devices"]
    lines += [
        f"#  Rank {d.rank:2d} Group  0 Pid {d.pid:6d} on {d.host:>10s} device {d.device:2d} "
        f"[{d.bus_id}] {d.name}"
        for d in devices
    ]
    return lines


_WIDTHS = (10, 12, 8, 6, 6, 7, 6, 6, 6, 7, 6, 6, 6)
"""Column widths of the header: size, count, type, redop, root, then time, algbw, busbw,
#wrong for each half (nccl-tests' ``writeResultHeader``)."""


def _columns(names: tuple[str, ...]) -> str:
    line = "# " + "  ".join(f"{name:>{width}}" for name, width in zip(names, _WIDTHS, strict=True))
    return line.rstrip()


def header() -> list[str]:
    half = ("time", "algbw", "busbw", "#wrong")
    units = ("(us)", "(GB/s)", "(GB/s)", "")
    return [
        "#",
        "# " + " " * (sum(_WIDTHS[:5]) + 2 * 4) + " " * 11 + "out-of-place" + " " * 23 + "in-place",
        _columns(("size", "count", "type", "redop", "root", *half, *half)),
        _columns(("(B)", "(elements)", "", "", "", *units, *units)),
    ]


def _half(h: Half) -> str:
    wrong = "   N/A" if h.wrong is None else f"{h.wrong:6g}"
    return f"  {float_str(h.time_us, 7)}  {float_str(h.algbw, 6)}  {float_str(h.busbw, 6)}  {wrong}"


def row_line(row: Row) -> str:
    return (
        f"{row.size:12d}  {row.count:12d}  {row.type:>8s}  {row.redop:>6s}  {row.root:6d}"
        + _half(row.out_of_place)
        + _half(row.in_place)
    )


def out_of_bounds(rows: list[Row]) -> int:
    """Row halves with a wrong element (nccl-tests counts these, not the elements)."""
    return sum(
        1 for r in rows for h in (r.out_of_place, r.in_place) if h.wrong is not None and h.wrong
    )


def avg_busbw(rows: list[Row]) -> float:
    """Mean busbw over every row, both halves (nccl-tests' ``Avg bus bandwidth``)."""
    values = [h.busbw for r in rows for h in (r.out_of_place, r.in_place)]
    return math.fsum(values) / len(values) if values else 0.0


def footer(rows: list[Row], program: str) -> list[str]:
    errors = out_of_bounds(rows)
    return [
        f"# {'Out of bounds values':<20s} : {errors} {'FAILED' if errors else 'OK'}",
        f"# {'Avg bus bandwidth':<20s} : {_g(avg_busbw(rows))}",
        "#",
        f"# Collective test concluded: {program}",
        "#",
    ]


def json_document(
    *, program: str, config: dict[str, Any], devices: list[DeviceInfo], rows: list[Row]
) -> dict[str, Any]:
    """The results as nccl-tests' ``-J`` JSON names them: one record per size (and type/op)."""
    errors = out_of_bounds(rows)
    return {
        "version": 1,
        "program": program,
        "config": config,
        "devices": [
            {k: v for k, v in asdict(d).items() if k not in ("machine", "free_bytes")}
            for d in devices
        ],
        "results": [
            {
                "size": r.size,
                "count": r.count,
                "type": r.type,
                "redop": r.redop,
                "root": r.root,
                "out_of_place": _json_half(r.out_of_place),
                "in_place": _json_half(r.in_place),
            }
            for r in rows
        ],
        "out_of_bounds": {"count": errors, "okay": errors == 0},
        "average_bus_bandwidth": {"bandwidth": avg_busbw(rows)},
    }


def _json_half(h: Half) -> dict[str, Any]:
    return {"time": h.time_us, "alg_bw": h.algbw, "bus_bw": h.busbw, "nwrong": h.wrong}
