"""Showing reports: one host's table, the host x check matrix of a job, the per-host values
and reachability of an isolated job's hosts, and JSON."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from tenter.doctor.result import CheckResult, HostReport, Status

if TYPE_CHECKING:
    from tenter.doctor.across import HostFacts
    from tenter.doctor.reach import Reachability

STYLES = {
    Status.PASS: "green",
    Status.WARN: "yellow",
    Status.FAIL: "bold red",
    Status.SKIP: "dim",
}


def _status(status: Status) -> Text:
    return Text(status.value, style=STYLES[status])


def host_table(report: HostReport, title: str | None = None) -> Table:
    """Every check of one host: status, what was found, and the fix."""
    table = Table(title=title or f"tenter doctor: {report.host}", show_lines=False)
    for column in ("check", "status", "found", "fix"):
        table.add_column(column, overflow="fold")
    for o in report.outcomes:
        table.add_row(
            o.check, _status(o.result.status), escape(o.result.found), escape(o.result.remedy)
        )
    return table


def problems_table(reports: list[HostReport], statuses: tuple[Status, ...], title: str) -> Table:
    """The outcomes of the given statuses on every host: host, check, found, fix."""
    table = Table(title=title)
    for column in ("host", "check", "status", "found", "fix"):
        table.add_column(column, overflow="fold")
    for report in reports:
        for o in report.outcomes:
            if o.result.status in statuses:
                table.add_row(
                    report.host,
                    o.check,
                    _status(o.result.status),
                    escape(o.result.found),
                    escape(o.result.remedy),
                )
    return table


@dataclass(frozen=True)
class Difference:
    """A host whose result of a check differs from most hosts'."""

    check: str
    host: str
    result: CheckResult
    usual: CheckResult


def differences(
    reports: list[HostReport], by_status: frozenset[str] = frozenset()
) -> list[Difference]:
    """Hosts that differ from the others, check by check (the node with another driver).
    The checks in ``by_status`` differ only by status: what they find names the host's own
    name or address, different on every host by design."""
    out = []
    checks = list(dict.fromkeys(o.check for r in reports for o in r.outcomes))
    for check in checks:
        results = {r.host: r.result(check) for r in reports}
        present = {host: res for host, res in results.items() if res is not None}
        if len(present) < 2:
            continue

        def key(res: CheckResult, check: str = check) -> object:
            return res.status if check in by_status else res

        # On a tie the first host's result counts as the usual one.
        usual_key = Counter(key(res) for res in present.values()).most_common(1)[0][0]
        usual = next(res for res in present.values() if key(res) == usual_key)
        out += [
            Difference(check, host, res, usual)
            for host, res in present.items()
            if key(res) != usual_key
        ]
    return out


def matrix(reports: list[HostReport], by_status: frozenset[str] = frozenset()) -> Table:
    """Checks down, hosts across; a cell that differs from most hosts is marked ``≠``."""
    odd = {(d.check, d.host) for d in differences(reports, by_status)}
    table = Table(title="tenter doctor: host x check (≠: differs from most hosts)")
    table.add_column("check")
    for r in reports:
        table.add_column(r.host, justify="center")
    checks = list(dict.fromkeys(o.check for r in reports for o in r.outcomes))
    for check in checks:
        cells: list[Text | str] = [check]
        for r in reports:
            res = r.result(check)
            if res is None:
                cells.append(Text("-", style="dim"))
                continue
            cell = _status(res.status)
            if (check, r.host) in odd:
                cell = Text(f"≠ {res.status.value}", style=f"{STYLES[res.status]} reverse")
            cells.append(cell)
        table.add_row(*cells)
    return table


def to_json(reports: list[HostReport]) -> str:
    failed = sum(len(r.failed) for r in reports)
    return json.dumps(
        {"ok": failed == 0, "failed": failed, "hosts": [r.to_dict() for r in reports]},
        indent=2,
    )


def facts_table(facts: list[HostFacts]) -> Table:
    """What each isolated host looks like from inside: a row per host, so that the table
    keeps its width (and stays readable at 100 columns) however many hosts the job has."""
    table = Table(title="tenter doctor: the hosts as their processes see them")
    for column in ("host", "hostname", "interfaces", "addresses", "gloo interface"):
        table.add_column(column)
    for f in facts:
        addresses = ", ".join(
            f"{name} {'/'.join(addrs)}" for name, addrs in f.interfaces.items() if addrs
        )
        table.add_row(
            escape(f.host),
            escape(f.hostname),
            escape(", ".join(f.interfaces)),
            escape(addresses),
            escape(f.chosen or "none"),
        )
    return table


def reach_table(reach: Reachability) -> Table:
    """Who reaches whom: sources down, targets across."""
    table = Table(title="tenter doctor: reachability (row -> column)")
    table.add_column("from \\ to")
    for host in reach.hosts:
        table.add_column(host, justify="center")
    for source in reach.hosts:
        cells: list[Text | str] = [source]
        for target in reach.hosts:
            if source == target:
                cells.append(Text("-", style="dim"))
                continue
            ok = reach.pair(source, target).ok
            cells.append(Text("ok" if ok else "unreachable", style="green" if ok else "bold red"))
        table.add_row(*cells)
    return table
