"""The hang verdict and report, and exit statuses, from made-up records (pure functions)."""

from __future__ import annotations

from pathlib import Path

from tenter.jobdir.host_ranks import RanksSummary, SummaryReader, write_summary
from tenter.launch.diagnosis import hang
from tenter.launch.diagnosis.hang import RankProgress
from tenter.launch.diagnosis.root_cause import exit_meaning


def rank(r: int, state: str = "entered", op: str = "all_reduce", seq: int = 7, step: int = 0,
         at: float = 100.0) -> RankProgress:  # fmt: skip
    return RankProgress(r, f"algo-{r + 1}", f"/logs/rank-{r}", 1000 + r, at, state, op, seq, step)


def test_the_hang_clock_starts_at_the_first_progress() -> None:
    starting = [rank(0, "started", "", 0, at=100.0), rank(1, "started", "", 0, at=101.0)]
    assert hang.hang_verdict(starting, now=150.0, hang_timeout=5) is None
    limit = hang.startup_timeout(5)
    verdict = hang.hang_verdict(starting, now=101.0 + limit, hang_timeout=5)
    assert (
        verdict == f"no rank reached its first collective or step within {limit:.0f} s of its start"
    )
    moving = [rank(0, at=100.0), rank(1, "started", "", 0, at=90.0)]
    assert hang.hang_verdict(moving, now=104.9, hang_timeout=5) is None
    assert hang.hang_verdict(moving, now=105.0, hang_timeout=5) == "no rank made progress for 5 s"


def test_after_a_group_restart_start_up_is_timed_as_at_launch() -> None:
    # algo-2 restarted at 110 (a rank started at 111); algo-1 still shows the stopped attempt.
    restarting = [rank(0, at=100.0), rank(1, "started", "", 0, at=111.0)]
    assert hang.hang_verdict(restarting, now=120.0, hang_timeout=5, restarted_at=110.0) is None
    assert hang.hang_verdict([rank(0, at=100.0)], 120.0, 5, restarted_at=110.0) is None
    limit = hang.startup_timeout(5)
    verdict = hang.hang_verdict(restarting, now=111.0 + limit, hang_timeout=5, restarted_at=110.0)
    assert (
        verdict == f"no rank reached its first collective or step within {limit:.0f} s of its start"
    )
    moving = [rank(0, at=100.0), rank(1, at=112.0)]
    assert hang.hang_verdict(moving, now=117.0, hang_timeout=5, restarted_at=110.0) == (
        "no rank made progress for 5 s"
    )


def test_the_hosts_summaries_give_the_verdict_every_rank_gives(tmp_path: Path) -> None:
    # The launcher reads one summary a host (each written by its agent), not every rank's record.
    hosts = {
        "algo-1": [rank(0, at=100.0), rank(1, "exiting", at=120.0)],
        "algo-2": [rank(2, "started", "", 0, at=111.0), rank(3, at=104.0)],
    }
    for name, ranks in hosts.items():
        (tmp_path / name).mkdir()
        write_summary(tmp_path / name, RanksSummary.of((p.time, p.state) for p in ranks))
    reader = SummaryReader()
    dirs = [str(tmp_path / name) for name in hosts]
    newest = RanksSummary.newest(reader.read(dirs))
    every = [p for ranks in hosts.values() for p in ranks]
    for now, restarted_at in [(108.0, 0.0), (109.0, 0.0), (120.0, 110.0), (500.0, 110.0)]:
        verdict = hang.hang_verdict(every, now, 5, restarted_at)
        assert hang.summary_verdict(newest, now, 5, restarted_at) == verdict
    assert hang.summary_verdict(newest, 109.0, 5) == "no rank made progress for 5 s"
    write_summary(tmp_path / "algo-2", RanksSummary(moved=130.0, current=130.0))
    assert RanksSummary.newest(reader.read(dirs)).moved == 130.0  # a changed file is read again


def test_ranks_that_leave_are_not_hung_however_slow_their_teardown() -> None:
    leaving = [rank(0, "exiting", at=100.0), rank(1, "exiting", at=100.0)]
    assert hang.hang_verdict(leaving, now=1e6, hang_timeout=5) is None
    one_left = [rank(0, "exiting", at=100.0), rank(1, at=100.0)]
    assert hang.hang_verdict(one_left, now=105.0, hang_timeout=5) == "no rank made progress for 5 s"
    text = hang.report(one_left, {1: ""}, 110.0, {0: "sleeping", 1: "sleeping"})
    assert "suspect: rank 0" not in text


def test_a_stopped_or_silent_rank_is_a_suspect_even_when_all_wait_in_the_same_collective() -> None:
    progress = [rank(r) for r in range(4)]
    stacks = {
        r: f'Current thread (most recent call first):\n  File "t.py", line {r}' for r in (0, 1, 2)
    }
    states = {0: "sleeping", 1: "sleeping", 2: "sleeping", 3: "stopped"}
    text = hang.report(progress, stacks, 110.0, states)
    assert "ranks 0-3: waiting in all_reduce #7 (entered 10.0 s ago)" in text
    assert "suspect: rank 3 on algo-4 (pid 1003, stopped): its process is stopped" in text
    assert text.count("suspect:") == 1
    states[3] = "disk-sleep"
    text = hang.report(progress, stacks, 110.0, states)
    assert "suspect: rank 3 on algo-4 (pid 1003, disk-sleep): it did not answer" in text


def test_the_ranks_behind_in_collectives_or_steps_are_suspects() -> None:
    progress = [rank(0, seq=8), rank(1, seq=8), rank(2, "done", seq=7)]
    text = hang.report(progress, {0: "", 1: "", 2: ""}, 110.0, {})
    assert (
        "suspect: rank 2 on algo-3 (pid 1002, unknown): behind: all_reduce #7, ranks 0-1 at #8"
        in text
    )
    steps = [rank(0, "step", "", 0, step=103), rank(1, "step", "", 0, step=102)]
    text = hang.report(steps, {0: "", 1: ""}, 110.0, {})
    assert "rank 1 on algo-2: no collective yet, step 102" in text
    assert (
        "suspect: rank 1 on algo-2 (pid 1001, unknown): behind: step 102, ranks 0 at step 103"
        in text
    )
    assert "no suspect" in hang.report(steps[:1], {0: ""}, 110.0, {})


def test_frozen_import_frames_are_not_shown_as_where_a_rank_is() -> None:
    stacks = (
        "Current thread 0x1 (most recent call first):\n"
        '  File "<frozen importlib._bootstrap>", line 241 in _call_with_frames_removed\n'
        '  File "/work/train.py", line 3 in <module>\n'
    )
    text = hang.report([rank(0, "done")], {0: stacks}, 110.0, {})
    assert 'File "/work/train.py", line 3 in <module>' in text
    assert "<frozen" not in text


HELPER_THREAD = """Thread 0x00007f4197cff6c0 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 629 in wait
  File "/src/tenter/runtime/flight_recorder.py", line 52 in _serve
  File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap
"""
MAIN_THREAD = """Current thread 0x00007f41b808db80 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 629 in wait
  File "/tests/launch/scripts/hang.py", line 14 in <module>
  File "<frozen runpy>", line 291 in run_path
  File "/src/tenter/runtime/bootstrap.py", line 145 in <module>
  File "<frozen runpy>", line 198 in _run_module_as_main
"""
"""A worker's faulthandler dump (CI run 10 of 2026-11-26, shortened): the threads other than
the main one come first."""


def test_where_a_rank_is_comes_from_its_main_thread_once_its_dump_is_whole() -> None:
    whole = HELPER_THREAD + "\n" + MAIN_THREAD
    # The reader may find the dump half written: it waits for the main thread's last frame.
    for partial in (HELPER_THREAD, whole[: whole.index("hang.py")], whole[:-20]):
        assert not hang.is_complete(partial)
    assert hang.is_complete(whole)
    text = hang.report([rank(0, "done")], {0: whole}, 110.0, {})
    assert 'now at:\n    File "/tests/launch/scripts/hang.py", line 14 in <module>' in text
    # The kernel may hand the signal to another thread: "Current thread" is then that one.
    swapped = whole.replace("Current thread", "Thread").replace(
        "Thread 0x00007f4197cff6c0", "Current thread 0x00007f4197cff6c0"
    )
    assert hang.is_complete(swapped)
    assert 'hang.py", line 14' in hang.report([rank(0, "done")], {0: swapped}, 110.0, {})


def test_an_exit_status_is_not_a_signal_and_oom_is_named_only_when_counted() -> None:
    assert exit_meaning(137).startswith("exit code 137 (the process exited with it")
    assert exit_meaning(-9, oom_kills=2).endswith("out-of-memory killer (2 OOM kills in the job)")
    assert "not by the out-of-memory killer" in exit_meaning(-9, oom_kills=0)
    assert "(see `dmesg`)" in exit_meaning(-9)
    assert (
        exit_meaning(-11) == "signal 11 (SIGSEGV, exit code 139): segmentation fault in native code"
    )
    assert exit_meaning(3) == "exit code 3"
