"""Network faults on isolated hosts (``tenter fault``): an elastic job goes on without a
partitioned host and takes it back after ``heal``; a static job stops with the partition as its
one root cause; ``kill`` is a lost host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tenter.errors import ExitCode, TenterError
from tenter.jobdir.events import EventKind
from tenter.launch.diagnosis import root_cause
from tenter.launch.launcher.isolation import faults
from tests.conftest import SCRIPTS, Background, assert_nothing_left, tenter
from tests.launch.specs import write_spec

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def short_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENTER_STOP_GRACE_S", "2")


def events(job_dir: Path) -> list[tuple[str, str]]:
    """The job's events but rendezvous rounds (and where each round's workers' store is), in
    order: (event, host)."""
    lines = (job_dir / "events.jsonl").read_text().splitlines()
    rounds = ("rendezvous", EventKind.WORKERS_STORE.value)
    return [(e["event"], e["host"]) for e in map(json.loads, lines) if e["event"] not in rounds]


def primary_failures(job_dir: Path) -> list[tuple[str, int]]:
    summary = json.loads((job_dir / "summary.json").read_text())
    return [(f["host"], f["rank"]) for f in summary["failures"] if not f["secondary"]]


def static_job() -> Background:
    """Two isolated hosts of one rank each, blocked once they are ready (no restarts)."""
    job = Background(
        "run", "--isolation", "network", "--hosts", "2", "--procs-per-host", "1",
        str(SCRIPTS / "block.py"),
    )  # fmt: skip
    job.wait_for("ready", count=2)
    return job


def test_an_elastic_job_goes_on_without_a_partitioned_host_and_takes_it_back(
    tmp_path: Path,
) -> None:
    finish = tmp_path / "finish"
    spec = write_spec(
        tmp_path,
        "until_file.py",
        instance_count=2,
        processes_per_host=1,
        isolation="network",
        environment={"FINISH_FILE": str(finish)},
        elastic={"min_hosts": 1, "max_restarts": 2, "rendezvous": {"last_call_timeout": 1}},
    )
    job = Background("run", str(spec))
    job.wait_for("ready world 2 rank 0", "ready world 2 rank 1")
    assert faults.partition(job.job_dir, "algo-2") == "partitioned host algo-2"
    # Either first: the restarted rank's line may reach the console before the launcher's.
    job.wait_for("host algo-2 unreachable since", "ready world 1 rank 0")
    with pytest.raises(TenterError, match="heal algo-1 failed: host algo-1 is not partitioned"):
        faults.heal(job.job_dir, "algo-1")  # the launcher refuses it, the job goes on
    assert faults.heal(job.job_dir, "algo-2") == "healed host algo-2"
    job.wait_for("ready world 2 rank 0", "ready world 2 rank 1")
    finish.touch()
    out = job.finish()
    assert job.proc.returncode == 0, out
    assert "tenter: fault: host algo-2 partitioned" in out
    assert "going on with 1 host" in out
    assert "rendezvous: 1 host (algo-1), world size 1" in out
    assert "host algo-2 reachable again; it rejoins at the next rendezvous" in out
    assert out.index("rendezvous: 1 host") < out.rindex("rendezvous: 2 hosts (algo-1, algo-2)")
    assert "(2 hosts x 1 process = 2 ranks)" in out  # nobody lost in the end
    seen = events(job.job_dir)
    # A restart's own events (restart, then its workers stopped) aside:
    assert [e for e in seen if e[0] not in ("restart", "stopped")] == [
        ("partition", "algo-2"),
        ("unreachable", "algo-2"),
        ("heal", "algo-2"),
    ]
    # algo-1's workers, blocked in a collective with the cut-off host, were restarted.
    assert seen.index(("restart", "algo-1")) > seen.index(("unreachable", "algo-2"))
    assert seen.index(("stopped", "algo-1")) > seen.index(("restart", "algo-1"))
    # Only algo-1's workers were stopped: its warm template went on serving the restart.
    assert "warm template exited" not in (job.job_dir / "logs/agent-algo-1.log").read_text()
    # The fenced host's first agent ended; a second one took it back, its own log kept apart.
    assert (job.job_dir / "logs" / "agent-algo-2.1.log").exists()
    assert_nothing_left(job.job_dir)


def test_a_partition_stops_a_static_job_with_one_root_cause() -> None:
    job = static_job()
    faults.partition(job.job_dir, "algo-2")
    out = job.finish()
    assert job.proc.returncode == ExitCode.JOB_FAILED, out
    assert "host algo-2 unreachable since" in out
    assert "the job cannot go on without it" in out
    summary = out[out.index("FAILED after") :]
    assert summary.count("root cause:") == 1
    assert "root cause: host algo-2 became unreachable at" in summary
    assert "(network partition)" in summary
    assert primary_failures(job.job_dir) == [("algo-2", root_cause.HOST_RANK)]
    assert_nothing_left(job.job_dir)


def test_kill_is_a_lost_host() -> None:
    job = static_job()
    killed = tenter("fault", job.job_dir.name, "kill", "algo-2")
    assert killed.returncode == 0, killed.stderr
    assert killed.stdout == "killed host algo-2\n"
    out = job.finish()
    assert job.proc.returncode == ExitCode.JOB_FAILED, out
    assert "fault: host algo-2 killed (its agent and workers, SIGKILL)" in out
    assert "root cause: host algo-2 lost (its agent, pid" in out
    assert primary_failures(job.job_dir) == [("algo-2", root_cause.HOST_RANK)]
    assert_nothing_left(job.job_dir)


def test_fault_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    release = tmp_path / "release"
    job = Background(
        "run", "--hosts", "1", "--env", f"RELEASE_FILE={release}",
        str(SCRIPTS / "wait_for_file.py"),
    )  # fmt: skip
    job.wait_for("ready")
    job_id = job.job_dir.name
    not_isolated = tenter("fault", job_id, "partition", "algo-1")
    assert not_isolated.returncode == ExitCode.BAD_INPUT
    assert "does not isolate its hosts (isolation: none)" in not_isolated.stderr
    assert "--isolation network" in not_isolated.stderr
    unknown_host = tenter("fault", job_id, "kill", "algo-9")
    assert unknown_host.returncode == ExitCode.BAD_INPUT
    assert "has no host 'algo-9'; its hosts: algo-1" in unknown_host.stderr
    unknown_action = tenter("fault", job_id, "unplug", "algo-1")
    assert unknown_action.returncode == ExitCode.BAD_INPUT
    assert "invalid choice: 'unplug'" in unknown_action.stderr
    release.touch()
    assert job.finish() and job.proc.returncode == 0
    finished = tenter("fault", job_id, "kill", "algo-1")
    assert finished.returncode == ExitCode.NO_SUCH_JOB
    assert f"job {job_id} has finished" in finished.stderr
    unknown_job = tenter("fault", "no-such-job", "kill", "algo-1")
    assert unknown_job.returncode == ExitCode.NO_SUCH_JOB
    assert "no job 'no-such-job'" in unknown_job.stderr
    # Nothing was asked of the job: no request left behind, no traceback.
    assert list((job.job_dir / "control").glob("*")) == []
    for done in (not_isolated, unknown_host, finished, unknown_job):
        assert "Traceback" not in done.stderr
    assert_nothing_left(job.job_dir)
