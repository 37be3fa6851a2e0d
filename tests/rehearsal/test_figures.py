"""The rehearsal's store figures: a phase's requests beyond the agents' steady polls, which
grow with the phase's length and not with what its event asked of the store."""

from __future__ import annotations

import pytest

from tenter.rehearsal.drive import Figures
from tenter.rehearsal.table import rows, scale_line


def _figures() -> Figures:
    figures = Figures(hosts=4, ranks=8)
    figures.store_requests = {"launch": 15.0, "kill": 40.0, "steady": 50.0}
    figures.store_window_s = {"launch": 6.0, "kill": 3.0, "steady": 5.0}
    return figures


def test_a_restarts_requests_are_its_count_less_the_polls_over_its_window() -> None:
    figures = _figures()
    assert figures.polls_per_host_s() == pytest.approx(10.0)
    assert figures.event_requests("kill") == pytest.approx(10.0)  # 40 - 10/s x 3 s
    assert figures.event_requests("launch") == 15.0  # no polls before the workers run
    assert figures.worst_phase_requests() == 15.0
    assert "store_requests_per_host=15.0" in scale_line(figures)
    shown = {what: measured for what, measured, _ in rows(figures, hang_timeout=10)}
    assert shown["store requests per host: kill"] == "40.0 (max 0), 10.0 beyond the polls"


def test_without_a_steady_phase_the_counts_are_taken_whole() -> None:
    figures = _figures()
    del figures.store_requests["steady"]
    assert figures.polls_per_host_s() == 0.0
    assert figures.worst_phase_requests() == 40.0
