"""The rehearsal at 64 hosts x 8 ranks: tenter's real launcher and agents over light ranks; the
summary, the ledger, the failure report and the hang report are right at that size."""

from __future__ import annotations

import json
from pathlib import Path

from tenter.rehearsal.drive import Rehearsal
from tenter.rehearsal.plan import MAX_RESTARTS, rehearsal_plan
from tenter.rehearsal.table import scale_line
from tests.conftest import assert_nothing_left

SPEC = Path(__file__).parents[2] / "examples" / "digits" / "job.yaml"
HOSTS, PROCS = 64, 8


def test_rehearsal_at_64_hosts_names_every_fault() -> None:
    plan = rehearsal_plan(SPEC, HOSTS, PROCS, step_s=0.5, hang_timeout=5)
    figures = Rehearsal(plan, hosts_per_pack=64, bound_s=40, steady=False).run()
    # Each phase is bounded (bound_s); how long they take is the benchmark's to say
    # (benchmarks/control_plane_scale.py, docs/scale.md), not this test's.
    print(scale_line(figures))
    assert set(figures.seconds) == {"first_step", "kill", "hang_named"}
    # A host is its template and its ranks: no spare waits (rehearsal.pack.LightPool), and
    # the kill's restart still forked every rank again (the events below).
    assert figures.processes_per_host == PROCS + 1
    job_dir = Path(plan.job_dir)
    summary = json.loads((job_dir / "summary.json").read_text())
    assert summary["state"] == "hang" and summary["exit_code"] != 0
    assert (summary["hosts"], summary["procs_per_host"]) == (HOSTS, PROCS)
    assert "straggler" not in summary["summary"]  # the light ranks step in lockstep
    ledger = json.loads((job_dir / "goodput.json").read_text())
    assert ledger["ranks"] == HOSTS * PROCS
    assert ledger["parts"]["fault"] > 0 and ledger["lost_steps"] > 0  # the rank's kill
    assert ledger["parts"]["hang"] > 0
    # The kill: every host restarted its workers once, in the round (a restart used).
    events = [json.loads(line) for line in (job_dir / "events.jsonl").open()]
    restarts = [e for e in events if e["event"] == "restart"]
    assert sorted(e["host"] for e in restarts) == sorted(h.name for h in plan.hosts)
    assert all(e["used"] and e["remaining"] == MAX_RESTARTS - 1 for e in restarts)
    # The failure report is the hang's: it names the stopped rank, stopped, and no other.
    assert summary["summary"].count("\nsuspect: ") == 1
    suspects = [line for line in figures.hang_report.splitlines() if line.startswith("suspect: ")]
    assert len(suspects) == 1, suspects
    assert "suspect: rank 1 on algo-1" in suspects[0]
    assert "its process is stopped" in suspects[0]
    # Constant per host, not O(hosts): what the launch's and the kill's events asked of the
    # store beyond the agents' looks at their peers (5-7 per host here; a host reading every
    # host's key would make 64+).
    assert 0 < figures.event_requests("launch") < HOSTS / 4
    assert 0 < figures.event_requests("kill") < HOSTS / 4
    assert_nothing_left(job_dir)
