"""Read nccl-tests logs (and tenter's own output, which has the same layout).

Accepts what real logs contain: mpirun's ``--tag-output`` prefixes (``[1,0]<stdout>:``,
tenter's ``[algo-1,0]<stdout>:``), NCCL INFO lines between rows, the old layout (an
``error`` column, no ``root``; all_gather with no ``redop``) and the current one (``root``,
``#wrong``, optional per-iteration columns). The header line says which columns a row has.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_TAG = re.compile(r"^\s*(?:\([^)]*\)\s*)?\[[^\]]*\]<std(?:out|err)>:")
"""An output tag: mpirun's ``[1,0]<stdout>:``, optionally after a launcher's own prefix."""
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
_START = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_TIME_COLUMNS = ("time", "cputime")


@dataclass(frozen=True)
class Measurement:
    time_us: float
    algbw: float
    busbw: float
    wrong: str
    """As printed: a count (``0``), a max error (``5e-07``, old layout) or ``N/A``."""


@dataclass(frozen=True)
class LogRow:
    size: int
    count: int
    type: str
    redop: str | None
    root: int | None
    out_of_place: Measurement | None
    in_place: Measurement | None

    @property
    def halves(self) -> list[Measurement]:
        return [h for h in (self.out_of_place, self.in_place) if h is not None]


@dataclass(frozen=True)
class Log:
    rows: list[LogRow] = field(default_factory=list)
    collective: str | None = None
    reported_avg_busbw: float | None = None
    """The log's own ``# Avg bus bandwidth`` figure, when present."""
    out_of_bounds: int | None = None

    @property
    def max_busbw(self) -> float:
        return max((h.busbw for r in self.rows for h in r.halves), default=0.0)

    @property
    def avg_busbw(self) -> float:
        """Mean busbw over every row and half, as nccl-tests computes its average."""
        values = [h.busbw for r in self.rows for h in r.halves]
        return math.fsum(values) / len(values) if values else 0.0


@dataclass
class _Columns:
    keys: list[str]
    """Names of the leading columns: size, count, type, [redop], [root]."""
    half_width: int
    """Columns per half: 4, or 8 with per-iteration statistics."""


def untag(line: str) -> str:
    return _TAG.sub("", line, count=1)


def parse_log(text: str) -> Log:
    rows: list[LogRow] = []
    columns: _Columns | None = None
    collective, avg, oob = None, None, None
    for raw in text.splitlines():
        line = untag(raw).strip()
        if line.startswith("#"):
            columns = _header(line) or columns
            if m := _AVG.match(line):
                avg = float(m.group(1))
            elif m := _OOB.match(line):
                oob = int(m.group(1))
            elif m := _START.match(line):
                collective = m.group(1)
        elif columns is not None and (row := _row(line.split(), columns)) is not None:
            rows.append(row)
    return Log(rows=rows, collective=collective, reported_avg_busbw=avg, out_of_bounds=oob)


def _header(line: str) -> _Columns | None:
    tokens = line.lstrip("#").split()
    if tokens[:2] != ["size", "count"]:
        return None
    times = [i for i, t in enumerate(tokens) if t in _TIME_COLUMNS]
    if not times:
        return None
    width = times[1] - times[0] if len(times) > 1 else 4
    return _Columns(keys=tokens[: times[0]], half_width=width)


def _row(tokens: list[str], columns: _Columns) -> LogRow | None:
    if len(tokens) < 7 or not (tokens[0].isdigit() and tokens[1].isdigit()):
        return None
    nkeys = len(columns.keys)
    if len(tokens) < nkeys + 4 + columns.half_width:
        # Old builds printed an empty redop for all_gather: one key token fewer.
        nkeys = len(tokens) - 4 - columns.half_width
    keys = dict(zip(columns.keys, tokens[:nkeys], strict=False))
    try:
        oop = _measurement(tokens[nkeys : nkeys + 4])
        ip = _measurement(tokens[nkeys + columns.half_width : nkeys + columns.half_width + 4])
    except ValueError:
        return None
    root = keys.get("root")
    return LogRow(
        size=int(tokens[0]),
        count=int(tokens[1]),
        type=keys.get("type", ""),
        redop=keys.get("redop"),
        root=int(root) if root is not None else None,
        out_of_place=oop,
        in_place=ip,
    )


def _measurement(tokens: list[str]) -> Measurement:
    if len(tokens) < 4:
        raise ValueError("incomplete half")
    return Measurement(float(tokens[0]), float(tokens[1]), float(tokens[2]), tokens[3])
