"""Reports: the host x check matrix marks the host that differs; JSON goes both ways."""

from __future__ import annotations

import json

from rich.console import Console

from tenter.doctor import CheckResult, HostReport
from tenter.doctor.render import differences, matrix, to_json
from tenter.doctor.result import Outcome

SAME = Outcome("versions", "v", CheckResult.ok("torch 2.5.1"))


def nccl(version: str) -> Outcome:
    return Outcome("nccl", "n", CheckResult.ok(f"NCCL {version}"))


REPORTS = [
    HostReport("algo-1", [SAME, nccl("2.21.5")]),
    HostReport("algo-2", [SAME, nccl("2.18.3")]),
    HostReport("algo-3", [SAME, nccl("2.21.5")]),
]


def test_differences_names_only_the_host_unlike_the_others() -> None:
    [diff] = differences(REPORTS)
    assert (diff.check, diff.host) == ("nccl", "algo-2")
    assert diff.result.found == "NCCL 2.18.3" and diff.usual.found == "NCCL 2.21.5"


def test_matrix_marks_the_differing_cell() -> None:
    console = Console(width=100, record=True)
    console.print(matrix(REPORTS))
    rows = {
        line.split()[1]: line
        for line in console.export_text().splitlines()
        if "│" in line and line.split()[1] in ("nccl", "versions")
    }
    assert rows["nccl"].count("≠") == 1
    assert "≠" not in rows["versions"]


def test_host_report_round_trips_through_json() -> None:
    data = json.loads(to_json(REPORTS))
    assert data["ok"] is True and data["failed"] == 0
    assert [HostReport.from_dict(h) for h in data["hosts"]] == REPORTS
