"""The tests' own waits (issue 24): each has a deadline, and one that fails stops the job and
reports what a CI log needs to find the cause: the console output, the job directory (kept)
and the tails of the job's logs."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from tests.conftest import SCRIPTS, Background, OutputReader, assert_nothing_left


def test_a_line_that_never_comes_fails_at_the_deadline() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; print('first', flush=True); time.sleep(60)"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    output = OutputReader(proc.stdout)
    try:
        output.wait_for("first")
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            output.wait_for("second", timeout=1)
        assert time.monotonic() - start < 10
    finally:
        proc.kill()
        proc.wait(timeout=60)
    assert output.read_all() == "first\n"


@pytest.mark.slow
def test_a_failed_wait_stops_the_job_and_reports_its_output_directory_and_logs() -> None:
    job = Background("run", "--hosts", "1", "--procs-per-host", "1", str(SCRIPTS / "block.py"))
    job.wait_for("ready 0")
    with pytest.raises(AssertionError) as failed:
        job.wait_for("a line never printed", timeout=1)
    report = str(failed.value)
    assert report.startswith("tenter did not print ('a line never printed',) (1x) within 1 s\n")
    assert "--- console output ---\n" in report and "ready 0" in report
    assert f"--- job directory (kept): {job.job_dir} ---" in report
    assert "--- rank-0.stdout (last " in report and "ready 0" in report.split("rank-0.stdout")[1]
    assert job.proc.returncode is not None  # stopped
    assert job.job_dir.exists()
    assert_nothing_left(job.job_dir)
