"""``tenter status JOB`` at any size: it prints what the job's launcher kept (``goodput.json``,
``progress.json``) rather than reading every rank's records, and loads neither the spec's
models (pydantic, the instance catalog) nor torch. tests/first_day/test_progress.py has the
lines it prints of a running job, of one whose launcher was killed, and of a finished one."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from tenter.cli.cmd_status import ledger_from_ranks
from tenter.jobdir.progress import ProgressSummary
from tests.conftest import REPO, WAIT_S, assert_nothing_left
from tests.first_day.test_progress import (
    POLL_S,
    detached,
    job_args,
    launcher_of,
    wait_for_status,
)

HEAVY = {
    "pydantic",
    "torch",
    "tenter.spec.catalog",
    "tenter.spec.job",
    "tenter.cli.options",
    "rich.console",
}
"""What the status path must not import: most of a second of start-up, whatever the job (rich:
only for an error)."""


def status_with_imports(job_id: str) -> tuple[str, set[str]]:
    """``tenter status JOB``'s output, and every module it imported."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "tenter", "status", job_id],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {
        line.rpartition("|")[2].strip()
        for line in done.stderr.splitlines()
        if line.startswith("import time:")
    }
    return done.stdout, imported


def test_status_of_a_running_job_prints_what_its_launcher_kept_and_loads_no_spec_nor_torch(
    tmp_path: Path, tenter_home: Path
) -> None:
    stop = tmp_path / "stop"
    with detached(tenter_home, *job_args(stop)) as (job_id, job_dir):
        wait_for_status(job_id, "progress: 4 ranks at step")
        launcher = launcher_of(job_dir)
        launcher.suspend()  # what it kept stays as it is; the ranks step on
        try:
            kept = ProgressSummary.from_dict(json.loads((job_dir / "progress.json").read_text()))
            ledger = json.loads((job_dir / "goodput.json").read_text())
            deadline = time.monotonic() + WAIT_S
            while (ledger_from_ranks(job_dir)[1].low or 0) <= (kept.high or 0):
                assert time.monotonic() < deadline, "the ranks never stepped past what was kept"
                time.sleep(POLL_S)
            running, imported = status_with_imports(job_id)
        finally:
            launcher.resume()
        assert kept.line() in running.splitlines()
        assert f"goodput {100 * ledger['goodput']:.1f} %" in running
        assert not HEAVY & imported, sorted(HEAVY & imported)
        stop.touch()
        wait_for_status(job_id, f"job {job_id}: SUCCEEDED")
        finished, imported = status_with_imports(job_id)
        assert f"job {job_id}: SUCCEEDED (backend local)" in finished
        assert not HEAVY & imported, sorted(HEAVY & imported)
    assert_nothing_left(job_dir)
