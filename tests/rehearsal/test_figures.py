"""The rehearsal's store figures: a phase's requests beyond the agents' polls, which grow
with the phase's length and not with what its event asked of the store."""

from __future__ import annotations

from tenter.rehearsal.drive import Figures
from tenter.rehearsal.table import rows, scale_line


def test_a_phases_event_requests_are_its_count_less_the_agents_polls() -> None:
    figures = Figures(hosts=4, ranks=8)
    figures.store_requests = {"launch": 15.0, "kill": 40.0, "steady": 50.0}
    figures.store_polls = {"launch": 5.0, "kill": 30.0, "steady": 45.0}
    assert figures.event_requests("kill") == 10.0
    assert figures.worst_phase_requests() == 10.0  # launch's and kill's, not the steady's
    assert "store_requests_per_host=10.0" in scale_line(figures)
    shown = {what: measured for what, measured, _ in rows(figures, hang_timeout=10)}
    assert shown["store requests per host: kill"] == "40.0 (max 0), 10.0 beyond the agents' polls"
