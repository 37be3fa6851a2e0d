"""Fault injection on the local backend: whatever dies or freezes, the report names it and no
process of the job outlives it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from pathlib import Path

import psutil
import pytest

from tenter.errors import ExitCode
from tenter.launch.diagnosis import root_cause
from tenter.runtime.compat import FLIGHT_RECORDER_BUFFER_VAR
from tests.conftest import (
    SCRIPTS,
    Background,
    assert_nothing_left,
    fill,
    job_dirs,
    job_processes,
    own_children,
    tenter,
)
from tests.launch.specs import lost_host_spec, write_spec

pytestmark = pytest.mark.slow

GRACE_S = 2
"""The stop grace period these tests run with (TENTER_STOP_GRACE_S), to keep them short."""
LONG_GRACE_S = 30
"""A grace period long enough that a stop which waits it out shows, even on a loaded machine."""
SLACK_S = 10
"""Beyond the grace period, what a loaded 2-core machine may take to start Python's signal
handlers and reap; torch's own grace (30 s), the bug this guards against, is far above."""


@pytest.fixture(autouse=True)
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENTER_STOP_GRACE_S", str(GRACE_S))


def agent_of(job_id: str, host: str) -> psutil.Process:
    (agent,) = [
        p
        for p in job_processes(job_id)
        if "tenter.launch.agent" in " ".join(p.cmdline()) and p.environ()["TENTER_HOST"] == host
    ]
    return agent


def printed_pid(lines: list[str], text: str) -> int:
    """The pid a rank printed as ``... <text> ... pid N``."""
    (line,) = [line for line in lines if text in line]
    return int(line.rsplit("pid ", 1)[1])


def test_launcher_sigkilled_leaves_no_worker_even_if_workers_ignore_sigterm() -> None:
    for _ in range(5):
        job = Background(
            "run", "--hosts", "2", "--procs-per-host", "1", str(SCRIPTS / "stubborn.py")
        )
        job.wait_for("ready", count=2)
        job_id = job.job_dir.name
        procs = job_processes(job_id)
        # Two agents, two workers, and by now perhaps the agents' warm spares.
        agents = [p for p in procs if "tenter.launch.agent" in " ".join(p.cmdline())]
        assert len(agents) == 2 and len(procs) >= 4
        job.kill()
        # No launcher, no sweep: the agents' parent-death signal stops the workers, SIGKILL
        # after the grace period because they ignore SIGTERM.
        _, alive = psutil.wait_procs(procs, timeout=GRACE_S + SLACK_S)
        assert alive == [], [p.cmdline() for p in alive]
        assert job_processes(job_id) == []
        status = tenter("status", job_id)
        assert "RUNNING" not in status.stdout + status.stderr
        assert list(Path("/dev/shm").glob(f"*{job_id}*")) == []
        for entry in job_dirs(job.home / "jobs"):  # the next round starts afresh
            entry.rename(job.home / f"done-{entry.name}")
    assert own_children() == []


def test_an_agent_killed_in_a_fixed_job_is_the_root_cause() -> None:
    job = Background("run", "--hosts", "2", "--procs-per-host", "1", str(SCRIPTS / "block.py"))
    job.wait_for("ready", count=2)
    agent = agent_of(job.job_dir.name, "algo-2")
    agent.kill()
    out = job.finish()
    assert job.proc.returncode == ExitCode.JOB_FAILED, out
    assert f"root cause: host algo-2 lost (its agent, pid {agent.pid}): signal 9 (SIGKILL" in out
    summary = json.loads((job.job_dir / "summary.json").read_text())
    root = [f for f in summary["failures"] if not f["secondary"]]
    assert [(f["host"], f["rank"]) for f in root] == [("algo-2", root_cause.HOST_RANK)]
    failure = (job.job_dir / "hosts/algo-1/output/failure").read_text()
    assert failure.startswith(
        "host algo-2 failed: host algo-2 lost: its agent was killed by SIGKILL"
    )
    assert_nothing_left(job.job_dir)


def test_elastic_summary_after_a_lost_host_names_the_survivors(tmp_path: Path) -> None:
    job = Background("run", str(lost_host_spec(tmp_path)))
    job.wait_for("ready world 2 rank 0", "ready world 2 rank 1")
    agent_of(job.job_dir.name, "algo-1").kill()  # the first host: the model line moves
    out = job.finish()
    assert job.proc.returncode == 0, out
    assert "host algo-1 lost (its agent was killed by SIGKILL); going on with 1 host" in out
    assert "rendezvous: 1 host (algo-2), world size 1" in out
    assert "done world 1 rank 0" in out
    assert "succeeded in" in out
    assert "(1 host x 1 process = 1 rank; lost: algo-1)" in out
    # algo-2 went on at once, within the round: no round of torch's rendezvous, which would
    # wait for algo-1's heartbeats to expire, then for its last call.
    agent_log = (job.job_dir / "logs/agent-algo-2.log").read_text()
    assert "restart 1 within the round: 1 host, without algo-1" in agent_log
    assert "joined round 1" not in agent_log
    assert f"model:   {job.job_dir / 'hosts/algo-2/model'}" in out
    hosts = job.job_dir / "hosts"
    assert not (hosts / "algo-1/output/success").exists()
    lost = (hosts / "algo-1/output/failure").read_text()
    assert lost == "host algo-1 lost: its agent was killed by SIGKILL\n"
    assert (hosts / "algo-2/output/success").exists()
    assert json.loads((job.job_dir / "summary.json").read_text())["hosts"] == 1
    # An elastic membership: every round, the first too, is torch's rendezvous'.
    events = [json.loads(e) for e in (job.job_dir / "events.jsonl").read_text().splitlines()]
    rounds = [(e["host"], e["attempt"], e["planned"]) for e in events if e["event"] == "rendezvous"]
    assert sorted(rounds) == [("algo-1", 0, False), ("algo-2", 0, False), ("algo-2", 1, False)]
    assert_nothing_left(job.job_dir)


@pytest.mark.parametrize(
    ("mode", "exit_code", "meaning"),
    [
        ("kill", -9, "signal 9 (SIGKILL, exit code 137): killed"),
        ("exit137", 137, "exit code 137 (the process exited with it: not killed by SIGKILL"),
    ],
)
def test_an_exit_code_is_told_from_a_signal_and_oom_named_only_when_counted(
    mode: str, exit_code: int, meaning: str
) -> None:
    done = tenter(
        "run", "--hosts", "2", "--procs-per-host", "2", "--env", f"FAIL_MODE={mode}",
        str(SCRIPTS / "fail.py"),
    )  # fmt: skip
    assert done.returncode == ExitCode.JOB_FAILED, done.stderr
    (root,) = [f for f in done.summary["failures"] if not f["secondary"]]  # type: ignore[attr-defined]
    assert root["exit_code"] == exit_code
    summary = done.stderr[done.stderr.index("FAILED after") :]
    assert "root cause: rank 3 on host algo-2 (local rank 1" in summary
    assert meaning in summary
    if mode == "exit137":
        assert "signal 9" not in summary
    elif root_cause.oom_kill_count() is None:
        assert "or the out-of-memory killer (see `dmesg`)" in summary
    else:  # the kernel counts OOM kills here: it counted none
        assert "not by the out-of-memory killer" in summary
    assert_nothing_left(done.job_dir)


def test_a_stopped_rank_is_named_as_the_suspect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A grace period that a stop waiting for the stopped rank would show.
    monkeypatch.setenv("TENTER_STOP_GRACE_S", str(LONG_GRACE_S))
    spec = write_spec(
        tmp_path, "loop.py", instance_count=2, processes_per_host=1, elastic={"hang_timeout": 3}
    )
    job = Background("run", str(spec))
    job.wait_for("step 5 rank 0", "step 5 rank 1")
    frozen = printed_pid(job.lines, "step 5 rank 1")
    os.kill(frozen, signal.SIGSTOP)
    out = job.finish()
    assert job.proc.returncode == ExitCode.HANG, out
    hang = (job.job_dir / "hang-report.txt").read_text()
    assert f"suspect: rank 1 on algo-2 (pid {frozen}, stopped): its process is stopped" in hang
    assert "suspect: rank 0" not in hang
    # The stop reaches the stopped rank too (continued after its SIGTERM), not only its SIGKILL
    # at the end of the grace period.
    ended = (job.job_dir / "summary.json").stat().st_mtime
    assert ended - (job.job_dir / "hang-report.txt").stat().st_mtime < LONG_GRACE_S / 2, out
    assert_nothing_left(job.job_dir)


REPORT_AFTER_VERDICT_S = 2.0
"""The hang check's period (0.5 s) and the live ranks' stacks, with margin for a loaded
machine: a report that waited out the stopped rank's stacks (3 s) or a dump it cannot write,
or dumps no rank records (2 s), comes 5 s after the verdict."""


def test_the_hang_report_waits_for_no_rank_that_cannot_answer(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        "loop.py",
        instance_count=2,
        processes_per_host=1,
        environment={FLIGHT_RECORDER_BUFFER_VAR: "0"},  # no rank has a flight recorder
        elastic={"hang_timeout": 3},
    )
    job = Background("run", str(spec))
    job.wait_for("step 5 rank 0", "step 5 rank 1")
    os.kill(printed_pid(job.lines, "step 5 rank 1"), signal.SIGSTOP)
    out = job.finish()
    assert job.proc.returncode == ExitCode.HANG, out
    records = [w.read_text().split("\n", 1)[0] for w in job.job_dir.rglob("*.watch")]
    verdict = max(json.loads(r)["time"] for r in records) + 3  # the last progress + timeout
    reported = (job.job_dir / "hang-report.txt").stat().st_mtime
    assert reported - verdict <= REPORT_AFTER_VERDICT_S, f"{reported - verdict:.1f} s\n{out}"
    assert not list(job.job_dir.rglob("*.fr.pkl"))
    assert_nothing_left(job.job_dir)


def test_ddp_rank_behind_in_steps_is_named_as_the_suspect(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path,
        "loop.py",
        instance_count=2,
        processes_per_host=1,
        environment={"DDP": "1", "STALL_RANK": "1"},
        elastic={"hang_timeout": 3},
    )
    done = tenter("run", str(spec))
    assert done.returncode == ExitCode.HANG, done.stderr
    hang = (done.job_dir / "hang-report.txt").read_text()
    # DDP's all-reduce is issued from C++: no collective is seen, the step counter is.
    assert "rank 0 on algo-1: no collective yet, step 6" in hang
    assert "rank 1 on algo-2: no collective yet, step 5" in hang
    assert re.search(
        r"suspect: rank 1 on algo-2 \(pid \d+, \w+\): behind: step 5, ranks 0 at step 6", hang
    )
    assert "suspect: rank 0" not in hang
    script = (SCRIPTS / "loop.py").read_text().splitlines()
    stall_line = script.index("            threading.Event().wait()") + 1
    assert f'File "{SCRIPTS / "loop.py"}", line {stall_line} in <module>' in hang
    assert_nothing_left(done.job_dir)


def test_start_up_slower_than_the_hang_timeout_is_no_hang(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path, "slow_start.py", instance_count=2, processes_per_host=1,
        elastic={"hang_timeout": 2},
    )  # fmt: skip
    done = tenter("run", str(spec))
    assert done.returncode == 0, done.stderr
    assert "finished 32.0" in done.stdout
    assert not (done.job_dir / "hang-report.txt").exists()
    assert_nothing_left(done.job_dir)


def test_the_hang_report_leaves_out_a_lost_hosts_ranks(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path, "loop.py", instance_count=3, processes_per_host=1,
        elastic={"min_hosts": 2, "max_restarts": 1, "hang_timeout": 3},
    )  # fmt: skip
    job = Background("run", str(spec))
    job.wait_for("step 5 rank 0", "step 5 rank 1", "step 5 rank 2")
    agent_of(job.job_dir.name, "algo-3").kill()
    job.wait_for("step 5 rank 0", "step 5 rank 1")  # the survivors, restarted
    frozen = int([line for line in job.lines if "step 5 rank 1" in line][-1].rsplit("pid ", 1)[1])
    os.kill(frozen, signal.SIGSTOP)
    out = job.finish()
    assert job.proc.returncode == ExitCode.HANG, out
    hang = (job.job_dir / "hang-report.txt").read_text()
    assert f"suspect: rank 1 on algo-2 (pid {frozen}, stopped)" in hang
    assert "algo-3" not in hang
    assert "rank 2" not in hang
    assert_nothing_left(job.job_dir)


def test_a_group_restart_slower_than_the_hang_timeout_is_no_hang(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rank 0's host stops its stubborn worker only after the grace period, longer than the
    # hang timeout: the restart's start-up is timed by the start-up timeout, as at launch.
    monkeypatch.setenv("TENTER_STOP_GRACE_S", "5")
    spec = write_spec(
        tmp_path, "slow_restart.py", instance_count=2, processes_per_host=1,
        elastic={"hang_timeout": 2, "max_restarts": 1},
    )  # fmt: skip
    done = tenter("run", str(spec))
    assert done.returncode == 0, done.stderr
    assert "finished attempt 1 rank 0" in done.stdout
    assert "finished attempt 1 rank 1" in done.stdout
    assert not (done.job_dir / "hang-report.txt").exists()
    assert_nothing_left(done.job_dir)


def test_a_disk_that_fills_mid_run_still_ends_the_job_with_a_summary(
    tmp_path: Path, small_disk: Path
) -> None:
    spec = write_spec(tmp_path, "fill_disk.py", instance_count=2, output_dir=str(small_disk))
    done = tenter("run", str(spec))
    assert done.returncode == ExitCode.JOB_FAILED, done.stderr
    assert "Traceback" not in done.stderr
    assert "FAILED after" in done.stderr
    (job_dir,) = job_dirs(small_disk)
    # Nothing more fits: not the rank's error record, nor the agents' reports, nor the summary.
    assert not (job_dir / "summary.json").exists()
    assert f"could not write the job's result to {job_dir}: No space left on device" in done.stderr
    assert "algo-1: its agent exited with status 1 without a report" in done.stderr
    assert job_processes(job_dir.name) == []
    assert own_children() == []
    assert list(job_dir.glob("hosts/*/.*.tmp")) == []


@pytest.mark.parametrize("problem", ["read-only", "a file", "full"])
def test_an_unusable_output_dir_is_bad_input_and_nothing_starts(
    tmp_path: Path, small_disk: Path, problem: str
) -> None:
    output_dir = small_disk / "out"
    if problem == "a file":
        output_dir.write_text("")
        expected = f"{output_dir} is a file, not a directory"
    elif problem == "full":
        fill(small_disk / "fill")
        expected = f"the file system of {small_disk} is full"
    else:
        subprocess.run(["mount", "-o", "remount,ro", str(small_disk)], check=True, timeout=60)
        expected = f"{small_disk} is on a read-only file system"
    spec = write_spec(tmp_path, "contract.py", output_dir=str(output_dir / "jobs"))
    done = tenter("run", str(spec))
    assert done.returncode == ExitCode.BAD_INPUT
    where = output_dir / "jobs"
    assert done.stderr.startswith(
        f"error: output_dir: cannot create job directories in {where}: {expected}. Fix: "
    )
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in small_disk.iterdir()) == sorted(
        {"a file": ["out"], "full": ["fill"], "read-only": []}[problem]
    )
    assert own_children() == []
