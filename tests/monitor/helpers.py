"""A job directory with made-up reports, for the monitor's tests that need no real job."""

from __future__ import annotations

import json
from pathlib import Path

from tenter.contract.plan import Plan
from tenter.jobdir import layout
from tenter.launch import api
from tenter.launch.launcher.output import create_job_dir
from tenter.monitor.metrics_files import rank_file
from tenter.spec import load

SCRIPTS = Path(__file__).parent / "scripts"
T0 = 1_000_000.0


def fake_job(hosts: int = 2, procs: int = 2, *, step_s: dict[int, float] | None = None) -> Plan:
    """A created (never run) job whose rank r reported steps 1..11 at ``step_s[r]`` seconds
    apart (default 1 s), 32 samples each, loss 1/step, total 100 steps."""
    spec, _ = load(
        {
            "entry_point": "reporting.py",
            "source_dir": str(SCRIPTS),
            "instance_count": 1,
            "processes_per_host": 1,
        },
        SCRIPTS,
    )
    # Sized up once checked: made-up ranks need none of the memory the capacity rule counts.
    sized = {"instance_count": hosts, "processes_per_host": procs}
    plan = api.dryrun(spec.model_copy(update=sized))
    create_job_dir(plan)
    index = Path(plan.job_dir) / "logs" / "index.jsonl"
    for host in plan.hosts:
        for r in host.ranks:
            entry = {"stem": layout.rank_stem(r.stdout, layout.STDOUT_SUFFIX), "rank": r.rank}
            entry |= {"local_rank": r.local_rank, "host": host.name, "attempt": 0}
            with open(index, "a") as fp:
                fp.write(json.dumps(entry) + "\n")
            every = (step_s or {}).get(r.rank, 1.0)
            lines = [
                {"time": T0 + every * (s - 1), "step": s, "samples": 32, "loss": 1 / s}
                | {"total_steps": 100, "metrics": {"lr": 0.1}}
                for s in range(1, 12)
            ]
            path = rank_file(plan.job_dir, r.rank)
            path.parent.mkdir(exist_ok=True)
            path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return plan


def launched_at(job_dir: Path, when: float) -> None:
    """Make the job's launch (the launch line of ``membership.jsonl``) ``when``."""
    launch = {"event": "launch", "time": when, "hosts": ["algo-1"]}
    (job_dir / layout.MEMBERSHIP_FILE).write_text(json.dumps(launch) + "\n")
