"""Issue 38, item 3: ``--max-restarts N`` is one budget for the job, as torchrun counts it, and
``TORCHELASTIC_RESTART_COUNT`` is the same on every rank of a restarted group. Plain torchrun
scripts (no tenter imports), started with torchrun's flags as a user would."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tenter.errors import ExitCode
from tests.conftest import Background, Finished, assert_nothing_left, tenter

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).parent / "scripts"
RESTARTING = re.compile(r"^tenter: (\S+): a worker failed; restarting the workers \((.*) left\)$")


def _run(script: str, *flags: str) -> Finished:
    return tenter("run", "--hosts", "2", "--procs-per-host", "2", *flags, str(SCRIPTS / script))


def _restart_counts(stdout: str) -> dict[int, list[int]]:
    """Each rank's TORCHELASTIC_RESTART_COUNT, one per start, as restart_count.py prints it."""
    counts: dict[int, list[int]] = {}
    for rank, count in re.findall(r"<stdout>: rank (\d+) restart count (\d+)$", stdout, re.M):
        counts.setdefault(int(rank), []).append(int(count))
    return counts


def _restarts_said(stderr: str) -> list[tuple[str, str]]:
    """The console's group restarts: (the host that saw a worker fail, what is left)."""
    return [m.groups() for line in stderr.splitlines() if (m := RESTARTING.match(line))]


def test_a_failure_on_one_host_restarts_every_rank_with_the_same_restart_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Rank 1 (on algo-1) fails once; the script resumes where TORCHELASTIC_RESTART_COUNT > 0.
    monkeypatch.setenv("FAIL_RANK", "1")
    done = _run("restart_count.py", "--max-restarts", "1")
    assert done.returncode == 0, done.stderr
    assert _restart_counts(done.stdout) == {rank: [0, 1] for rank in range(4)}, done.stdout
    assert _restarts_said(done.stderr) == [("algo-1", "0 restarts")], done.stderr
    assert_nothing_left(done.job_dir)


def test_a_rank_that_fails_every_attempt_ends_the_job_after_its_one_restart(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FAIL_RANK", "1")
    monkeypatch.setenv("FAILURES", "99")
    done = _run("restart_count.py", "--max-restarts", "1")
    assert done.returncode == ExitCode.JOB_FAILED, done.stderr
    assert _restart_counts(done.stdout) == {rank: [0, 1] for rank in range(4)}, done.stdout
    assert _restarts_said(done.stderr) == [("algo-1", "0 restarts")], done.stderr
    assert "root cause: rank 1 on host algo-1 (local rank 1, " in done.stderr
    assert "rank-1.algo-1.attempt-1.stderr" in done.stderr  # the last attempt's failure
    assert_nothing_left(done.job_dir)


@pytest.mark.parametrize("max_restarts", [1, 2])
def test_failures_on_either_host_use_the_jobs_one_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, max_restarts: int
) -> None:
    # Every attempt fails, on algo-1 and algo-2 by turns: each host's own count of its
    # failures would allow twice the restarts.
    monkeypatch.setenv("STARTS_DIR", str(tmp_path))
    done = _run("fails_by_turns.py", "--max-restarts", str(max_restarts))
    assert done.returncode == ExitCode.JOB_FAILED, done.stderr
    attempts = {p.name: len(p.read_text().splitlines()) for p in tmp_path.glob("rank-*")}
    assert attempts == {f"rank-{r}": max_restarts + 1 for r in range(4)}, done.stderr
    expected = {
        1: [("algo-1", "0 restarts")],
        2: [("algo-1", "1 restart"), ("algo-2", "0 restarts")],
    }
    assert _restarts_said(done.stderr) == expected[max_restarts], done.stderr
    failed_last = "rank 3 on host algo-2" if max_restarts == 1 else "rank 1 on host algo-1"
    assert f"root cause: {failed_last} " in done.stderr
    assert_nothing_left(done.job_dir)


def test_a_host_joining_after_a_restart_counts_it_and_uses_none(
    tenter_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One host; its rank fails once, then trains until a second host joins (`tenter join`):
    # the new round of torch's rendezvous gives the new host's ranks the job's count, and
    # the restart that lets it in uses none of the job's restarts.
    monkeypatch.setenv("FAIL_RANK", "0")
    monkeypatch.setenv("TARGET_WORLD", "2")
    job = Background(
        "run",
        "--nnodes",
        "1:2",
        "--nproc-per-node",
        "1",
        "--max-restarts",
        "2",
        "--rdzv-conf",
        "last_call_timeout=1",
        str(SCRIPTS / "restart_count.py"),
        home=tenter_home,
    )
    job.wait_for("ready world 1 rank 0 restart count 1")
    joined = tenter("join", job.job_dir.name)
    assert joined.returncode == 0, joined.stderr
    out = job.finish()
    assert job.proc.returncode == 0, out
    assert "rendezvous: 2 hosts (algo-1, algo-2), world size 2" in out
    assert "[algo-1,0]<stdout>: ready world 2 rank 0 restart count 1" in out
    assert "[algo-2,1]<stdout>: ready world 2 rank 1 restart count 1" in out
    assert _restarts_said(out) == [("algo-1", "1 restart")], out
    assert_nothing_left(job.job_dir)
