"""Fault tolerance on the local backend: restarts that resume from checkpoints, hosts lost and
joining, hangs, etcd."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tenter.contract.plan import read_plan
from tenter.errors import ExitCode
from tests.conftest import REPO, SCRIPTS, Background, assert_nothing_left, job_dirs, tenter
from tests.launch.etcd_server import etcd_server
from tests.launch.specs import joinable_spec, write_spec

pytestmark = pytest.mark.slow


def test_workers_restart_after_a_sigkill_and_the_job_succeeds(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path, "flaky.py", instance_count=2, processes_per_host=2, elastic={"max_restarts": 1}
    )
    done = tenter("run", str(spec))
    assert done.returncode == 0, done.stderr
    assert (
        "tenter: algo-1: a worker failed; restarting the workers (0 restarts left)" in done.stderr
    )
    assert done.stderr.count("tenter: rendezvous: 2 hosts (algo-1, algo-2), world size 4") == 2
    finished = {p.name.split("-")[1] for p in (done.job_dir / "seen").iterdir()}
    assert finished == {"0", "1", "2", "3"}
    # The second attempt wrote its own files; the first attempt's are kept.
    assert (done.job_dir / "logs/rank-1.algo-1.attempt-1.stdout").exists()
    assert (done.job_dir / "logs/rank-0.stdout").read_text().startswith("attempt 0 rank 0")
    assert_nothing_left(done.job_dir)


def test_rank_failing_as_the_others_finish_restarts_every_host(tmp_path: Path) -> None:
    # Ranks 0, 2 and 3 finish while rank 1 exits 3: algo-2, all of whose ranks finished,
    # waited in its exit barrier while algo-1 waited for it to join the restart (until
    # killed from outside). It now joins the restart from the barrier.
    spec = write_spec(
        tmp_path,
        "fails_as_others_finish.py",
        instance_count=2,
        processes_per_host=2,
        elastic={"max_restarts": 1},
    )
    done = tenter("run", str(spec), timeout=60)
    assert done.returncode == 0, done.stderr
    for rank in range(4):
        assert f"attempt 1 rank {rank} done" in done.stdout
    assert done.stderr.count("tenter: rendezvous: 2 hosts (algo-1, algo-2), world size 4") == 2
    assert_nothing_left(done.job_dir)


def test_training_killed_after_and_between_checkpoints_resumes_to_the_uninterrupted_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The restarted workers run from warm spares, as on a GPU host (this test's workers get
    # them by default only on a machine of 4 CPUs or more).
    monkeypatch.setenv("TENTER_WARM_WORKERS", "1")
    train = str(REPO / "examples" / "elastic" / "train.py")
    job: dict[str, object] = {
        # 4 ranks: with 2, an all-reduce sums the same pairs whatever DDP's bucket layout,
        # which a resume changes for one step (the example's hook all-reduces each gradient
        # on its own: without it, the final models differ in the last bits).
        "instance_count": 2,
        "processes_per_host": 2,
        "checkpoint": {"every": 4},  # the example takes it from the spec: 16 steps, 4 saves
    }
    # Rank 3 (on algo-2) is killed right after the checkpoint of step 8, and once restarted,
    # at step 14, between the checkpoints of steps 12 and 16.
    spec = write_spec(
        tmp_path,
        "kill_after_checkpoint.py",
        args=[train, "--epochs", "1"],
        environment={"KILL_RANK": "3", "KILL_AT_STEPS": "8,14"},
        elastic={"max_restarts": 2},
        **job,
    )
    done = tenter("run", str(spec))
    assert done.returncode == 0, done.stderr
    assert "tenter: algo-2: a worker failed; restarting the workers (1 restart left)" in done.stderr
    assert (
        "tenter: algo-2: a worker failed; restarting the workers (0 restarts left)" in done.stderr
    )
    # Each restart resumed from the last checkpoint: nothing lost after the kill at step 8,
    # the 2 steps since the checkpoint (less than an interval) after the kill at step 14.
    assert re.findall(r"<stdout>: resumed at step (\d+) ", done.stdout) == ["8", "12"]
    assert_nothing_left(done.job_dir)

    reference = tmp_path / "reference"
    spec = write_spec(tmp_path, train, args=["--epochs", "1"], output_dir=str(reference), **job)
    uninterrupted = tenter("run", str(spec))
    assert uninterrupted.returncode == 0, uninterrupted.stderr
    (reference_dir,) = job_dirs(reference)
    # Resume is exact: the same batches, dropout masks, momentum and learning rate.
    expected, resumed = (
        torch.load(job_dir / "hosts" / "algo-1" / "model" / "model.pt")
        for job_dir in (reference_dir, done.job_dir)
    )
    assert resumed.keys() == expected.keys()
    for key, value in expected.items():
        assert torch.equal(resumed[key], value), key
    assert_nothing_left(reference_dir)


def test_a_host_joins_a_running_job(tmp_path: Path, tenter_home: Path) -> None:
    spec = joinable_spec(tmp_path)
    job = Background("run", str(spec), home=tenter_home)
    job.wait_for("ready world 1 rank 0")
    joined = tenter("join", job.job_dir.name)
    assert joined.returncode == 0, joined.stderr
    out = job.finish()
    assert job.proc.returncode == 0, out
    assert "host algo-2 joining" in out
    assert "rendezvous: 2 hosts (algo-1, algo-2), world size 2" in out
    assert "[algo-2,1]<stdout>: done world 2 rank 1" in out
    plan = json.loads((job.job_dir / "plan.json").read_text())
    assert [h["name"] for h in plan["hosts"]] == ["algo-1"]  # as launched
    assert [h.name for h in read_plan(job.job_dir).hosts] == ["algo-1", "algo-2"]
    assert_nothing_left(job.job_dir)


def test_join_refuses_a_finished_or_unknown_job(tenter_home: Path) -> None:
    done = tenter("join", "no-such-job")
    assert done.returncode == ExitCode.NO_SUCH_JOB
    assert "JOB: no job 'no-such-job'" in done.stderr


def test_hang_report_names_the_rank_that_never_arrived(tmp_path: Path) -> None:
    spec = write_spec(
        tmp_path, "hang.py", instance_count=2, processes_per_host=2, elastic={"hang_timeout": 3}
    )
    done = tenter("run", str(spec))
    assert done.returncode == ExitCode.HANG
    report = (done.job_dir / "hang-report.txt").read_text()
    assert "hang: no rank made progress for 3 s" in report
    assert "ranks 0-2: waiting in all_reduce #6" in report
    assert "rank 3 on algo-2: last completed all_reduce #5" in report
    assert f'File "{SCRIPTS / "hang.py"}", line 14 in <module>' in report
    assert "ranks 0-2: waiting in all_reduce #6" in done.stderr
    assert_nothing_left(done.job_dir)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def etcd(tmp_path: Path) -> Iterator[str]:
    """A real etcd on loopback, stopped after."""
    with etcd_server(tmp_path / "etcd", "127.0.0.1", (_free_port(), _free_port())) as endpoint:
        yield endpoint


def test_rendezvous_through_a_real_etcd(tmp_path: Path, etcd: str) -> None:
    spec = write_spec(
        tmp_path,
        "contract.py",
        instance_count=2,
        processes_per_host=1,
        elastic={"rendezvous": {"backend": "etcd", "endpoint": etcd}},
    )
    done = tenter("run", str(spec))
    assert done.returncode == 0, done.stderr
    assert "[algo-2,1]<stdout>: rank 1 of 2 on algo-2: all_reduce ok" in done.stdout


def test_unreachable_etcd_fails_fast_naming_the_endpoint(tmp_path: Path) -> None:
    endpoint = f"127.0.0.1:{_free_port()}"
    spec = write_spec(
        tmp_path,
        "contract.py",
        instance_count=2,
        processes_per_host=1,
        elastic={"rendezvous": {"backend": "etcd", "endpoint": endpoint, "join_timeout": 20}},
    )
    done = tenter("run", str(spec))
    assert done.returncode == 1
    # Both hosts fail the same way; which one reports first is a race.
    assert re.search(
        rf"algo-[12]: rendezvous \(etcd-v2 at {re.escape(endpoint)}\) failed: "
        "RendezvousConnectionError",
        done.stderr,
    ), done.stderr
    assert "serves the v2 API" in done.stderr
