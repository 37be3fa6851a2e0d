"""nccl-tests' output layout, reproduced: the ``#`` preamble, the two-level header, one row
per size, and the footer (nccl-tests' ``src/util.cu``). Pure functions of the results."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from tenter.perf.options import PerfOptions

TIME_FORMAT = "%Y-%m-%d %H:%M:%S"
"""nccl-tests' timestamps (``-S``, and the JSON start and end times)."""


@dataclass(frozen=True)
class IterStats:
    """``-I 1``: the per-iteration times of one row half (nccl-tests' ``IterStats``)."""

    per_process_us: list[list[float]]
    """One row per rank: that rank's time of each timed iteration."""
    skipped: int
    """Leading iterations left out of the statistics (``-K``)."""

    @property
    def times_us(self) -> list[float]:
        """Each iteration's time: the slowest rank's."""
        return [max(column) for column in zip(*self.per_process_us, strict=True)]

    @property
    def _summary(self) -> list[float]:
        return sorted(self.times_us[self.skipped :])

    def percentile(self, p: int) -> float:
        """Nearest rank, as nccl-tests picks it (``percentileIndex``)."""
        ordered = self._summary
        n = len(ordered)
        return ordered[min(n - 1, (n * p + 99) // 100 - 1)]

    @property
    def stats(self) -> dict[str, float]:
        ordered = self._summary
        avg = math.fsum(ordered) / len(ordered)
        stdev = statistics.pstdev(ordered)
        return {
            "min_us": ordered[0],
            "max_us": ordered[-1],
            "avg_us": avg,
            "p50_us": ordered[len(ordered) // 2],
            "p95_us": self.percentile(95),
            "p99_us": self.percentile(99),
            "stdev_us": stdev,
            "cv_pct": stdev / avg * 100 if avg > 0 else 0.0,
        }


@dataclass(frozen=True)
class Half:
    """The out-of-place or in-place half of a row."""

    time_us: float
    algbw: float
    """GB/s (10**9 bytes per second)."""
    busbw: float
    wrong: int | None
    """Wrong elements summed over ranks; None: not checked (printed N/A)."""
    errors: int = 0
    """Ranks with a wrong element, summed over the checked runs (nccl-tests' count)."""
    per_iter: IterStats | None = None


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
    timestamp: str | None = None
    """``-S 1``: when the row was measured."""


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
    for spec in (".2f", ".1f", ".0f"):
        text = f"{value:{width}{spec}}"
        if len(text) <= width:
            return text
    return f"{value:{width}.1e}" if width >= 7 else f"{value:{width}.0e}"


def preamble(
    opts: PerfOptions, program: str, version_line: str, devices: list[DeviceInfo]
) -> list[str]:
    step = f"{opts.stepfactor}(factor)" if opts.stepfactor > 1 else f"{opts.stepbytes}(bytes)"
    lines = [
        f"# {version_line}",
        f"# Collective test starting: {program}",
        f"# nThread 1 nGpus 1 minBytes {opts.minbytes} maxBytes {opts.maxbytes} step: {step} "
        f"warmup iters: {opts.warmup_iters} iters: {opts.iters} agg iters: {opts.agg_iters} "
        f"validation: {opts.check} graph: 0 unalign: {opts.unalign}",
    ]
    blocking = {
        1: "# Blocking Enabled: wait and barrier after each inner iteration (-m)",
        2: "# Blocking Enabled: wait after each inner iteration (-m), no barrier",
        3: "# Blocking Enabled: wait and barrier after each outer iteration (-n); "
        "time excludes barrier",
    }
    if opts.blocking:
        lines.append(blocking[opts.blocking])
    if opts.per_iter_timing:
        skip = (
            f"; summary skips first {opts.per_iter_skip} iterations" if opts.per_iter_skip else ""
        )
        device_timer = "CUDA event" if opts.device == "cuda" else "wall-clock"
        lines.append(
            f"# Per-Iteration Report: {device_timer} timing; i_* uses max over process rows{skip}"
        )
    lines += ["#", "# Using devices"]
    lines += [
        f"#  Rank {d.rank:2d} Group  0 Pid {d.pid:6d} on {d.host:>10s} device {d.device:2d} "
        f"[{d.bus_id}] {d.name}"
        for d in devices
    ]
    return lines


_KEYS = ("%10s", "%12s", "%8s", "%6s", "%6s")
_HALF = ("%7s", "%6s", "%6s", "%6s")
_ITER = ("%7s", "%7s", "%7s", "%7s")
_TITLE = "           out-of-place                       in-place"
_ITER_TITLE = (
    "              out-of-place (+ per-iteration)"
    "                                in-place (+ per-iteration)"
)


def header(opts: PerfOptions) -> list[str]:
    """nccl-tests' ``writeResultHeader`` (trailing blanks dropped)."""
    time_name = "cputime" if opts.report_cputime else "time"
    half, units = [time_name, "algbw", "busbw", "#wrong"], ["(us)", "(GB/s)", "(GB/s)", ""]
    formats = list(_HALF)
    if opts.per_iter_timing:
        half += ["i_min", "i_max", "i_p99", "i_cv%"]
        units += ["(us)", "(us)", "(us)", "(%)"]
        formats += _ITER
    keys = "# " + "  ".join(_KEYS)
    layout = "  ".join((keys, *formats, *formats)) + (" %19s" if opts.report_timestamps else "")
    stamp = (["timestamp"], [TIME_FORMAT]) if opts.report_timestamps else ([], [])
    title = _ITER_TITLE if opts.per_iter_timing else _TITLE
    lines = [
        keys % (("",) * 5) + title,
        layout % ("size", "count", "type", "redop", "root", *half, *half, *stamp[0]),
        layout % ("(B)", "(elements)", "", "", "", *units, *units, *stamp[1]),
    ]
    return ["#", *(line.rstrip() for line in lines)]


def _half(h: Half, per_iter: bool) -> str:
    wrong = "   N/A" if h.wrong is None else f"{h.wrong:6g}"
    text = f"  {float_str(h.time_us, 7)}  {float_str(h.algbw, 6)}  {float_str(h.busbw, 6)}  {wrong}"
    if per_iter and h.per_iter is not None:
        s = h.per_iter.stats
        figures = (s["min_us"], s["max_us"], s["p99_us"], s["cv_pct"])
        text += "".join(f"  {float_str(v, 7)}" for v in figures)
    return text


def row_line(row: Row) -> str:
    per_iter = row.out_of_place.per_iter is not None
    line = (
        f"{row.size:12d}  {row.count:12d}  {row.type:>8s}  {row.redop:>6s}  {row.root:6d}"
        + _half(row.out_of_place, per_iter)
        + _half(row.in_place, per_iter)
    )
    return line + (f"{row.timestamp:>21s}" if row.timestamp else "")


def out_of_bounds(rows: list[Row]) -> int:
    """nccl-tests' "Out of bounds values": for every checked run of every row half, the
    number of ranks that found a wrong element."""
    return sum(h.errors for r in rows for h in (r.out_of_place, r.in_place))


def avg_busbw(rows: list[Row]) -> float:
    """Mean busbw over every row, both halves (nccl-tests' ``Avg bus bandwidth``)."""
    values = [h.busbw for r in rows for h in (r.out_of_place, r.in_place)]
    return math.fsum(values) / len(values) if values else 0.0


def bandwidth_ok(rows: list[Row], min_busbw: float | None) -> bool | None:
    """The ``NCCL_TESTS_MIN_BW`` gate (GB/s): None when unset; like nccl-tests, the average
    busbw passes at 90% of the floor."""
    return None if min_busbw is None else avg_busbw(rows) >= min_busbw * 0.9


def footer(rows: list[Row], program: str, min_busbw: float | None = None) -> list[str]:
    errors = out_of_bounds(rows)
    gate = {None: "", True: " OK", False: " FAILED"}[bandwidth_ok(rows, min_busbw)]
    return [
        f"# {'Out of bounds values':<20s} : {errors} {'FAILED' if errors else 'OK'}",
        f"# {'Avg bus bandwidth':<20s} : {avg_busbw(rows):g}{gate}",
        "#",
        f"# Collective test concluded: {program}",
    ]


@dataclass(frozen=True)
class MemoryUse:
    """``-M 1``: bytes each phase added, the largest over ranks (nccl-tests' memInfo)."""

    initialization: int
    user_allocated: int
    collective: int


def memory_line(use: MemoryUse, device_type: str) -> str:
    parts = [
        ("Initialization", use.initialization),
        ("User-Allocated", use.user_allocated),
        ("Collective", use.collective),
    ]
    listed = " | ".join(f"{name} {_mem(amount)}" for name, amount in parts)
    total = sum(amount for _, amount in parts)
    what = "GPU memory usage" if device_type == "cuda" else "Host memory usage"
    return f"# {what:<20s} : {listed} | Total  {_mem(total)}"


def _mem(amount: int) -> str:
    """nccl-tests' ``getMemString``: binary units, 2, 1 or 0 decimals by magnitude."""
    value, unit = float(amount), "B"
    for name, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if abs(value) >= scale:
            value, unit = value / scale, name
            break
    decimals = 2 if abs(value) < 10 else 1 if abs(value) < 100 else 0
    return f"{value:.{decimals}f} {unit}"
