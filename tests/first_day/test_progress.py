"""Issue 38, item 5: a plain torchrun DDP script's progress (no ``tenter.report``) where a user
looks: the live view on a terminal, ``tenter status`` and ``tenter report``, with the steps
tenter counted and the straggler the launcher named; and ``tenter status`` of a detached job
says running while its launcher runs, killed once it was SIGKILLed."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO, WAIT_S, assert_nothing_left, job_dirs, job_processes, tenter

pytestmark = pytest.mark.slow
SCRIPT = str(Path(__file__).parent / "scripts" / "plain_ddp.py")
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
SHOWN_CHARS = 3000
"""Of the terminal's text, in a failed wait's message: its last few frames."""
POLL_S = 0.5
"""Between two `tenter status` of a wait (each takes about a second itself)."""


def job_args(stop_file: Path, *extra: str) -> list[str]:
    """tests/first_day/scripts/plain_ddp.py on 2 hosts x 2 processes, until ``stop_file``."""
    return ["--hosts", "2", "--procs-per-host", "2", "--env", f"STOP_FILE={stop_file}", *extra]


class Terminal:
    """``tenter ARGS`` on a terminal of its own (a pseudo-terminal, 200 x 50): what a user
    sees, escape sequences removed."""

    def __init__(self, *args: str) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 200, 0, 0))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tenter", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            cwd=REPO,
            env={**os.environ, "TERM": "xterm-256color"},
            start_new_session=True,
        )
        os.close(slave)
        self._master = master
        self.text = ""

    def _read(self, deadline: float) -> bool:
        """Take what the terminal shows next; False at its end."""
        ready, _, _ = select.select([self._master], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            return True
        try:
            data = os.read(self._master, 65536)
        except OSError:  # EIO: every process holding the terminal is gone
            return False
        self.text += ANSI.sub("", data.decode(errors="replace"))
        return bool(data)

    def wait_for(self, *patterns: str) -> list[re.Match[str]]:
        """The first match of each pattern, once all have appeared (within WAIT_S)."""
        deadline = time.monotonic() + WAIT_S
        while True:
            found = [re.search(p, self.text) for p in patterns]
            if all(found):
                return [m for m in found if m is not None]
            if time.monotonic() > deadline or not self._read(deadline):
                last = self.text[-SHOWN_CHARS:]
                raise AssertionError(f"the terminal never showed {patterns}; it ends:\n{last}")

    def finish(self) -> int:
        deadline = time.monotonic() + WAIT_S
        while self._read(deadline) and time.monotonic() < deadline:
            pass
        return self.proc.wait(timeout=WAIT_S)

    def close(self) -> None:
        """Stop it as Ctrl-C would, if it still runs."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=WAIT_S)
            self.proc.kill()
            self.proc.wait(timeout=WAIT_S)
        os.close(self._master)


def wait_for_status(job_id: str, *texts: str) -> str:
    """`tenter status JOB` again until its output has every text (within WAIT_S)."""
    deadline = time.monotonic() + WAIT_S
    while True:
        out = tenter("status", job_id).stdout
        if all(text in out for text in texts):
            return out
        assert time.monotonic() < deadline, f"`tenter status` never said {texts}:\n{out}"
        time.sleep(POLL_S)


@contextlib.contextmanager
def detached(job_dir_home: Path, *args: str) -> Iterator[tuple[str, Path]]:
    """``tenter run --detach ARGS SCRIPT``: (its job id, its directory); the job is cancelled
    at the end if a failed test left it running."""
    started = tenter("run", "--detach", *args, SCRIPT)
    assert started.returncode == 0, started.stderr
    job_id = started.stdout.strip()
    try:
        yield job_id, job_dir_home / "jobs" / job_id
    finally:
        tenter("cancel", job_id)  # says "is not running" of a job that ended


def launcher_of(job_dir: Path) -> psutil.Process:
    """The launcher process the job's handle names."""
    pid, _, _ = json.loads((job_dir / "handle.json").read_text())["scheduler_id"].partition("@")
    return psutil.Process(int(pid))


def test_live_view_and_report_show_ddp_steps_and_straggler_of_a_plain_torchrun_script(
    tmp_path: Path, tenter_home: Path
) -> None:
    stop = tmp_path / "stop"
    view = Terminal("run", *job_args(stop, "--env", "SLOW_RANK=2"), SCRIPT)
    try:
        # Each rank's row: host, rank, state, step (was "starting", with no step, to the end).
        rows = [rf"algo-{1 + r // 2}\s+{r}\s+running\s+(\d+)" for r in range(4)]
        *_, straggler = view.wait_for(*rows, r"straggler: (rank 2 on algo-2 is [^\n]*?per step)")
        stop.touch()
        assert view.finish() == 0, view.text
    finally:
        view.close()
    (job_dir,) = job_dirs(tenter_home / "jobs")
    steps = json.loads((job_dir / "summary.json").read_text())["goodput"]["productive_steps"]
    assert steps >= 16  # the rule names a straggler after 16 steps at the earliest
    assert re.search(rf"algo-2\s+2\s+\w+\s+{steps}\s", view.text)  # its last step, at the end

    done = tenter("report", job_dir.name)
    assert done.returncode == 0, done.stderr
    page = (job_dir / "report" / "report.md").read_text()
    assert "No rank reported progress" not in page
    assert "Steps are the DDP steps tenter counted" in page
    for rank in range(4):
        mark = " **straggler**" if rank == 2 else ""
        assert f"| {rank}{mark} | algo-{1 + rank // 2} | {steps} | 0 |" in page
    assert f"- {straggler.group(1)}" in page
    assert_nothing_left(job_dir)


def test_status_of_a_detached_job_says_running_with_its_ddp_progress_and_straggler(
    tmp_path: Path, tenter_home: Path
) -> None:
    stop = tmp_path / "stop"
    with detached(tenter_home, *job_args(stop, "--env", "SLOW_RANK=2")) as (job_id, job_dir):
        launcher = launcher_of(job_dir)
        # Caught before it started a process of the job (they carry TENTER_JOB_ID; it does not).
        launcher.suspend()
        try:
            assert job_processes(job_id) == [], "the launcher started the job before the test"
            status = tenter("status", job_id).stdout
            assert f"job {job_id}: RUNNING (launcher pid {launcher.pid}, 0 processes" in status
        finally:
            launcher.resume()
        status = wait_for_status(job_id, "progress: 4 ranks at step", "straggler: rank 2 on algo-2")
        assert f"job {job_id}: RUNNING (launcher pid {launcher.pid}, " in status
        assert "DDP steps counted by tenter (the script does not call tenter.report)" in status
        stop.touch()
        wait_for_status(job_id, f"job {job_id}: SUCCEEDED")
    assert_nothing_left(job_dir)


def test_status_of_a_detached_job_says_its_launcher_was_killed_if_it_was_sigkilled(
    tmp_path: Path, tenter_home: Path
) -> None:
    with detached(tenter_home, *job_args(tmp_path / "never")) as (job_id, job_dir):
        launcher = launcher_of(job_dir)
        wait_for_status(job_id, f"RUNNING (launcher pid {launcher.pid}, ", "progress: 4 ranks at")
        launcher.kill()
        # Its agents stop the workers when it dies (their parent-death signal).
        status = wait_for_status(job_id, f"job {job_id}: ENDED without a summary")
        assert "no process of the job is left (its launcher was killed)" in status
        assert job_processes(job_id) == []
