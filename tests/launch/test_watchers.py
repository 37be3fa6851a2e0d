"""The launcher loop's watchers (issue 40): each says why the job must stop, or None."""

from __future__ import annotations

import subprocess
import sys
import threading

from tenter.jobdir.results import JobState
from tenter.launch.launcher.watchers.deadline import MaxRunWatcher


def test_max_run_stops_the_job_once_its_time_is_past() -> None:
    watcher = MaxRunWatcher(started=100.0, max_run=10)
    assert watcher.tick(110.0) is None
    assert watcher.tick(110.5) is JobState.MAX_RUN
    assert MaxRunWatcher(started=100.0, max_run=None).tick(1e9) is None


def test_a_stop_without_a_preemption_grace_interrupts_the_job() -> None:
    from tenter.launch.launcher.preemption import PreemptionWatch
    from tenter.launch.launcher.watchers.stop import StopWatcher

    class NoGrace:  # the one field the watcher reads
        preemption_grace = 0

    stop = threading.Event()
    plan = NoGrace()
    watcher = StopWatcher(plan, stop, PreemptionWatch(plan))  # type: ignore[arg-type]
    assert watcher.tick(0.0) is None
    stop.set()
    assert watcher.tick(0.0) is JobState.INTERRUPTED


def test_a_preemption_the_backend_started_ends_once_its_grace_is_spent() -> None:
    from tenter.launch.launcher.watchers.stop import StopWatcher

    class Grace:
        preemption_grace = 30

    class DrainStarted:  # a Ray node drain's preemption: no stop signal, its grace spent
        requested = True

        def expired(self) -> bool:
            return True

    watcher = StopWatcher(Grace(), threading.Event(), DrainStarted())  # type: ignore[arg-type]
    assert watcher.tick(0.0) is JobState.PREEMPTED


def test_a_slurm_node_does_not_import_the_launcher_loop() -> None:
    code = (
        "import sys, tenter.launch.backends.slurm.node; "
        "print(sorted(m for m in sys.modules if m.startswith('tenter.launch.super')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_job_states_are_written_as_their_strings() -> None:
    assert [s.value for s in JobState] == [
        "running",
        "succeeded",
        "failed",
        "interrupted",
        "preempted",
        "max_run",
        "hang",
    ]
    assert f"{JobState.PREEMPTED}" == "preempted"
