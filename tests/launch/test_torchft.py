"""Per-step fault tolerance with torchft (``fault_tolerance``) on the local backend: two replica
groups of one host and one process each, training examples/torchft/train.py."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import torch

from tenter.cli.main import main
from tenter.data.ledger import read_sample_log, sample_ledger
from tenter.errors import ExitCode
from tenter.launch import compat
from tenter.launch.launcher.isolation import faults
from tests.conftest import (
    REPO,
    Background,
    assert_nothing_left,
    job_processes,
    port_is_free,
    tenter,
    warning_lines,
)
from tests.launch.listening import foreign, listening, own_addresses
from tests.launch.slurm_cluster import queue, slurm_cluster
from tests.launch.specs import write_spec

pytestmark = pytest.mark.slow

TRAIN = str(REPO / "examples" / "torchft" / "train.py")


def ft_spec(
    tmp_path: Path,
    steps: int,
    *,
    min_replicas: int = 2,
    max_restarts: int = 1,
    args: tuple[str, ...] = (),
    isolation: str = "none",
    **environment: str,
) -> Path:
    """Two groups; by default both must train every step (min_replicas 2): a group that stops
    stops the step, so a fault at step N is met at step N whatever the machine's load."""
    return write_spec(
        tmp_path,
        "ft_faults.py",
        args=[TRAIN, "--steps", str(steps), *args],
        instance_count=2,
        processes_per_host=1,
        environment={"RUST_LOG": "warn", **environment},
        elastic={"max_restarts": max_restarts},
        fault_tolerance={"replica_groups": 2, "min_replicas": min_replicas},
        isolation=isolation,
    )


def events(job_dir: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in (job_dir / "events.jsonl").read_text().splitlines()]


def assert_same_model(job_dir: Path) -> None:
    """Every group ends with the same parameters: the healed one took its peer's state."""
    first = torch.load(job_dir / "hosts/algo-1/model/model.pt")
    second = torch.load(job_dir / "hosts/algo-2/model/model.pt")
    assert first and first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)


def assert_lighthouse_gone(out: str) -> None:
    (port,) = set(re.findall(r"torchft lighthouse at http://127\.0\.0\.1:(\d+)", out))
    assert port_is_free("127.0.0.1", int(port))


def test_a_killed_group_restarts_alone_and_heals_from_its_peer_at_the_current_step(
    tmp_path: Path,
) -> None:
    # 32 steps of 2 groups x 32 samples: 2 epochs of the example's 1024.
    spec = ft_spec(tmp_path, steps=32, FT_KILL_GROUP="1", FT_KILL_AT="12")
    run = Background("run", str(spec))
    out = run.finish()
    assert run.proc.returncode == 0, out
    assert "tenter: replica group 1 lost at step 12 (algo-2: a worker failed" in out
    healed = re.search(r"tenter: replica group 1 healed at step (\d+) from group 0", out)
    assert healed, out
    assert int(healed.group(1)) >= 12  # no step lost: it resumed where its peer was
    seen = events(run.job_dir)
    assert [e["host"] for e in seen if e["event"] == "restart"] == ["algo-2"]
    assert [e["host"] for e in seen if e["event"] == "rendezvous"].count("algo-1") == 1
    lost = [e for e in seen if e["event"] == "replica_lost"]
    assert [(e["group"], e["step"]) for e in lost] == [(1, 12)]
    assert [(e["group"], e["source"]) for e in seen if e["event"] == "replica_healed"] == [(1, 0)]
    assert "done after 32 steps" in (run.job_dir / "logs/rank-0.stdout").read_text()
    assert_same_model(run.job_dir)
    # ft.SampleDealer: every sample of both epochs trained on once, across the loss and heal.
    epochs = sample_ledger(read_sample_log(run.job_dir), 1024)
    assert [(e.epoch, e.seen, e.duplicates, e.gaps) for e in epochs.values()] == [
        (0, 1024, {}, []),
        (1, 1024, {}, []),
    ]
    # The heal fetched the peer's state over torchft's HTTP transport without torch's
    # warning of a non-writable buffer (tenter.runtime.compat.http_checkpoint_transport).
    assert warning_lines(run.job_dir, out) == []
    assert (run.job_dir / "logs/lighthouse.log").exists()
    assert_lighthouse_gone(out)
    assert_nothing_left(run.job_dir)


def test_a_group_without_restarts_is_lost_and_the_job_goes_on_with_min_replicas(
    tmp_path: Path,
) -> None:
    spec = ft_spec(
        tmp_path, steps=30, min_replicas=1, max_restarts=0, FT_KILL_GROUP="1", FT_KILL_AT="12"
    )
    run = Background("run", str(spec))
    out = run.finish()
    assert run.proc.returncode == 0, out
    # With min_replicas 1, group 0 may train ahead while group 1 starts: group 1 then joins
    # (heals) past step 12, and dies at its first step from 12 on.
    lost = re.search(r"tenter: replica group 1 lost at step (\d+) \(its restarts are spent\)", out)
    assert lost and int(lost.group(1)) >= 12, out
    assert "host algo-2 lost: replica group 1 stopped: its restarts are spent" in out
    assert "done after 30 steps" in (run.job_dir / "logs/rank-0.stdout").read_text()
    assert [e["event"] for e in events(run.job_dir)].count("restart") == 0
    assert_nothing_left(run.job_dir)


def test_the_job_fails_when_fewer_than_min_replicas_groups_can_go_on(tmp_path: Path) -> None:
    spec = ft_spec(tmp_path, steps=30, max_restarts=0, FT_KILL_GROUP="1", FT_KILL_AT="12")
    run = Background("run", str(spec))
    out = run.finish()
    assert run.proc.returncode == ExitCode.JOB_FAILED, out
    assert "tenter: replica group 1 lost at step 12 (its restarts are spent)" in out
    assert "1 replica groups left, fewer than min_replicas 2" in out
    assert "root cause: rank 1 on host algo-2" in out
    assert_nothing_left(run.job_dir)


def lighthouse_of(job_id: str) -> psutil.Process:
    (proc,) = [
        p
        for p in psutil.process_iter(["cmdline", "environ"])
        if (p.info["environ"] or {}).get("TENTER_JOB_ID") == job_id
        and "tenter.launch.launcher.lighthouse" in (p.info["cmdline"] or [])
    ]
    return proc


def test_a_killed_lighthouse_is_restarted_and_the_groups_train_on(tmp_path: Path) -> None:
    pause = tmp_path / "pause"
    pause.mkdir()
    spec = ft_spec(
        tmp_path, steps=30, FT_PAUSE_GROUP="0", FT_PAUSE_AT="10", FT_PAUSE_DIR=str(pause)
    )
    run = Background("run", str(spec))
    run.wait_for("torchft lighthouse at")
    # Group 0 waits after its step 10 (or the first after it both groups took part in, if
    # group 1 joined late): the next quorum is asked of the restarted lighthouse.
    run.wait_for("paused after step ")
    # What the job's processes listen on while the groups train (checked once it ended).
    found = listening([psutil.Process(run.proc.pid), *job_processes(run.job_dir.name)])
    os.kill(lighthouse_of(run.job_dir.name).pid, signal.SIGKILL)
    run.wait_for("torchft lighthouse exited (killed by signal 9); restarting it")
    (pause / "go").write_text("")
    out = run.finish()
    assert run.proc.returncode == 0, out
    seen = events(run.job_dir)
    assert [e for e in seen if e["event"] in ("restart", "replica_lost")] == []
    for rank in (0, 1):
        assert "done after 30 steps" in (run.job_dir / f"logs/rank-{rank}.stdout").read_text()
    assert_same_model(run.job_dir)
    assert_lighthouse_gone(out)
    assert_nothing_left(run.job_dir)
    # Every server of the job (the launcher, the lighthouse, the agents; the workers'
    # ManagerServer, checkpoint transport and gloo) was on its own addresses: torchft's own
    # Manager binds the ManagerServer and the transport to every interface.
    assert len(found) == 6, found  # every process of the job listened: none was missed
    assert foreign(found, own_addresses(run.job_dir)) == {}, found


def test_the_other_group_goes_on_at_once_without_a_partitioned_one_which_comes_back_healed(
    tmp_path: Path,
) -> None:
    pause = tmp_path / "pause"
    pause.mkdir()
    timeout_s = 60  # torchft's for a collective (its default): what the survivor must not wait
    spec = ft_spec(
        tmp_path,
        steps=200,
        min_replicas=1,
        args=("--timeout", str(timeout_s)),
        isolation="network",
        FT_ALONE_PACE_S="0.1",  # group 0 alone: 0.1 s a step, so group 1 is back before the end
        FT_PAUSE_GROUP="0",
        FT_PAUSE_AT="10",
        FT_PAUSE_DIR=str(pause),
    )
    run = Background("run", str(spec))
    # Group 1 waits for group 0's next quorum; group 0 asks for it once algo-2 is cut off,
    # while the lighthouse still has algo-2's heartbeats (1 s): the step they share hangs.
    # Step 10, or the first after it both groups took part in (group 1 may join late).
    run.wait_for("paused after step ")
    assert faults.partition(run.job_dir, "algo-2") == "partitioned host algo-2"
    (pause / "go").write_text("")
    run.wait_for("host algo-2 unreachable since")
    declared = time.monotonic()
    # Group 0 trains on alone (it prints every 20 steps) without waiting out the hung step.
    run.wait_for("groups 1", timeout=timeout_s / 2)
    assert time.monotonic() - declared < timeout_s / 2
    assert faults.heal(run.job_dir, "algo-2") == "healed host algo-2"
    run.wait_for("replica group 1 healed at step")
    out = run.finish()
    assert run.proc.returncode == 0, out
    assert re.search(r"replica group 1 lost at step \d+ \(algo-2 unreachable since", out), out
    seen = events(run.job_dir)
    assert [e["group"] for e in seen if e["event"] == "replica_lost"] == [1]
    assert [e["host"] for e in seen if e["event"] == "restart"] == []  # group 0 never restarted
    assert [(e["group"], e["source"]) for e in seen if e["event"] == "replica_healed"][-1] == (1, 0)
    assert "done after 200 steps" in (run.job_dir / "logs/rank-0.stdout").read_text()
    # Group 1's worker of the healed host's new agent (its files name the attempt).
    (restarted,) = run.job_dir.glob("logs/rank-1.algo-2.attempt-*.stdout")
    assert "done after 200 steps" in restarted.read_text()
    assert_same_model(run.job_dir)
    assert_nothing_left(run.job_dir)


def test_a_torch_that_torchft_cannot_train_with_is_refused_before_anything_starts(
    tmp_path: Path,
    tenter_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # This torch has what torchft's gloo group sets (torch 2.7.1's has not: checked by hand).
    assert compat.torchft_gloo_problem() is None
    monkeypatch.setattr(compat, "torchft_gloo_problem", lambda: "torch 2.7 has none")
    spec = ft_spec(tmp_path, steps=10)
    assert main(["run", str(spec)]) == ExitCode.BAD_INPUT
    err = capsys.readouterr().err
    assert "fault_tolerance: torch 2.7 has none. Fix: run it with torch 2.10 or later" in err
    assert not (tenter_home / "jobs").exists()


@pytest.fixture(scope="module")
def slurm() -> Iterator[dict[str, str]]:
    with slurm_cluster() as env, pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLURM_CONF", env["SLURM_CONF"])
        yield env


def test_a_replica_group_trains_under_torchfts_lighthouse_on_slurm(
    slurm: dict[str, str], tmp_path: Path
) -> None:
    # The test cluster has one node: one replica group, with the lighthouse on that node.
    spec = write_spec(
        tmp_path,
        "ft_faults.py",
        args=[TRAIN, "--steps", "20"],
        backend="slurm",
        processes_per_host=1,
        environment={"RUST_LOG": "warn"},
        fault_tolerance={"replica_groups": 1, "min_replicas": 1},
    )
    done = tenter("run", str(spec))
    assert done.returncode == 0, done.stderr
    assert "done after 20 steps" in (done.job_dir / "logs/rank-0.stdout").read_text()
    host, port = (done.job_dir / "lighthouse-port").read_text().split(":")
    assert "torchft lighthouse listening on" in (done.job_dir / "logs/lighthouse.log").read_text()
    assert port_is_free(socket.gethostbyname(host), int(port))
    assert queue(slurm) == []
    assert_nothing_left(done.job_dir)
