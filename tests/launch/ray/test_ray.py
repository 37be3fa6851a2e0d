"""The ray backend on a real Ray cluster: the local one tenter starts for a job, one Ray node
(its own raylet) per host. The 2 x 2 job with each rank's planned environment is
tests/launch/test_plan_is_what_runs.py's ``ray`` case; here, what else the backend must do."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tenter.errors import ExitCode
from tenter.launch.backends.ray.cluster import LocalCluster
from tests.conftest import Background, assert_nothing_left, job_dirs, tenter
from tests.launch.specs import lost_host_spec, write_spec
from tests.launch.test_faults import agent_of
from tests.launch.test_job_verbs import wait_for_ready
from tests.launch.test_preemption import latest_checkpoint, training_spec

pytestmark = pytest.mark.slow
ENTRYPOINT = "tenter.launch.backends.ray.entrypoint"


def ray_processes_in(temp_dir: str) -> list[str]:
    """The command lines of the processes of the Ray cluster whose directory is ``temp_dir``."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        if temp_dir in cmdline:
            found.append(cmdline)
    return found


def test_a_killed_worker_restarts_on_ray_and_the_cluster_is_gone_after(tmp_path: Path) -> None:
    # The same spec file as tests/launch/test_elastic.py runs on the local backend.
    spec = write_spec(
        tmp_path, "flaky.py", instance_count=2, processes_per_host=2, elastic={"max_restarts": 1}
    )
    done = tenter("run", "--backend", "ray", str(spec))
    assert done.returncode == 0, done.stderr
    assert "tenter: algo-1: a worker failed; restarting the workers (0 restarts left)" in (
        done.stderr
    )
    assert done.stderr.count("tenter: rendezvous: 2 hosts (algo-1, algo-2), world size 4") == 2
    finished = {p.name.split("-")[1] for p in (done.job_dir / "seen").iterdir()}
    assert finished == {"0", "1", "2", "3"}
    # Two Ray nodes, each its own raylet, in the job's own Ray directory.
    logs = done.job_dir / "logs"
    assert sorted(p.name for p in logs.glob("ray-node-*.log")) == [
        "ray-node-0.log",
        "ray-node-1.log",
    ]
    assert_cluster_gone(done.job_dir)
    assert_nothing_left(done.job_dir)


def assert_cluster_gone(job_dir: Path) -> None:
    """The local Ray cluster tenter started for the job: its directory and processes gone."""
    logs = (job_dir / "logs" / "ray-node-1.log").read_text()
    found = re.search(r"/tmp/tenter-ray-\w+", logs)
    assert found is not None
    assert not Path(found.group()).exists()
    assert ray_processes_in(found.group()) == []


def raylet_of(agent: psutil.Process) -> psutil.Process:
    """The raylet of an agent's Ray node: the parent of its actor's worker process."""
    raylet = agent.parent().parent()
    assert raylet.name() == "raylet", raylet.cmdline()
    return raylet


def test_a_killed_raylet_is_a_lost_host_an_elastic_job_goes_on_without(tmp_path: Path) -> None:
    # The same spec file as tests/launch/test_faults.py's lost host on the local backend.
    job = Background("run", "--backend", "ray", str(lost_host_spec(tmp_path)))
    job.wait_for("ready world 2 rank 0", "ready world 2 rank 1")
    raylet_of(agent_of(job.job_dir.name, "algo-2")).kill()
    out = job.finish()
    assert job.proc.returncode == 0, out
    assert "host algo-2 lost (its Ray node was lost); going on with 1 host" in out
    assert "rendezvous: 1 host (algo-1), world size 1" in out
    assert "done world 1 rank 0" in out
    assert "(1 host x 1 process = 1 rank; lost: algo-2)" in out
    lost = (job.job_dir / "hosts/algo-2/output/failure").read_text()
    assert lost == "host algo-2 lost: its Ray node was lost\n"
    # Within the round, as on the local backend (the launcher declared algo-2 lost).
    agent_log = (job.job_dir / "logs/agent-algo-1.log").read_text()
    assert "restart 1 within the round: 1 host, without algo-2" in agent_log
    assert_nothing_left(job.job_dir)


def raylet_flag(raylet: psutil.Process, flag: str) -> str:
    """The value of a raylet's ``--<flag>=VALUE`` argument."""
    (value,) = [a.split("=", 1)[1] for a in raylet.cmdline() if a.startswith(f"--{flag}=")]
    return value


def drain(raylet: psutil.Process, deadline_s: int) -> str:
    """``ray drain-node`` of a raylet's node, as autoscaler v2 drains a spot node before it
    goes (the node stays up: Ray leaves the kill to the caller); its node id."""
    temp_dir, node = raylet_flag(raylet, "temp_dir"), raylet_flag(raylet, "node_id")
    drained = subprocess.run(
        [
            str(Path(sys.executable).parent / "ray"),
            "drain-node",
            "--address",
            raylet_flag(raylet, "gcs-address"),
            "--node-id",
            node,
            "--reason",
            "DRAIN_NODE_REASON_PREEMPTION",
            "--reason-message",
            "spot reclaim",
            "--deadline-remaining-seconds",
            str(deadline_s),
        ],
        env={**os.environ, **LocalCluster(temp_dir, "").auth_env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert drained.returncode == 0, drained.stderr
    return node


def test_a_node_drain_and_sigterm_preempt_a_ray_job_and_a_lost_node_fails_a_rigid_one(
    tmp_path: Path,
) -> None:
    # tests/launch/test_preemption.py's job on the local backend: the request at step 6, the
    # ranks' agreement at step 7; the agents (Ray actors) see the job directory's request.
    ckpt = tmp_path / "ckpt"
    job = Background("run", str(preempted_spec(tmp_path, "drained", ckpt, 6)))
    job.wait_for("paused at step 6", count=2)
    (job_dir,) = job_dirs(tmp_path / "drained")
    node = drain(raylet_of(agent_of(job_dir.name, "algo-2")), 60)
    out = job.finish()
    assert job.proc.returncode == ExitCode.PREEMPTED, out
    assert re.search(
        rf"^tenter: ray: node {node} \(host algo-2\) is draining: deadline in (59|60) s "
        r"\(\d\d:\d\d:\d\d\); preempting the job$",
        out,
        re.M,
    ), out
    assert_preempted_at(job_dir, out, ckpt, 7)

    # The same command again resumes at step 7 (no step lost); SIGTERM preempts it at step 11.
    job = Background("run", str(preempted_spec(tmp_path, "sigterm", ckpt, 10)))
    job.wait_for("paused at step 10", count=2)
    job.proc.send_signal(signal.SIGTERM)
    out = job.finish()
    assert job.proc.returncode == ExitCode.PREEMPTED, out
    assert "<stdout>: resumed at step 7 " in out, out
    (job_dir,) = job_dirs(tmp_path / "sigterm")
    assert_preempted_at(job_dir, out, ckpt, 11)

    # Its node lost, a host whose job cannot go on without it (min_hosts: all) fails the job.
    job = Background("run", str(preempted_spec(tmp_path, "lost", ckpt, 12)))
    job.wait_for("paused at step 12", count=2)
    (job_dir,) = job_dirs(tmp_path / "lost")
    raylet_of(agent_of(job_dir.name, "algo-2")).kill()
    out = job.finish()
    assert job.proc.returncode == ExitCode.JOB_FAILED, out
    summary = json.loads((job_dir / "summary.json").read_text())
    assert summary["state"] == "failed", summary
    assert "host algo-2 lost: its Ray node was lost" in out, out
    assert_cluster_gone(job_dir)
    assert_nothing_left(job_dir)


def preempted_spec(tmp_path: Path, output: str, ckpt: Path, pause_at: int) -> Path:
    return training_spec(
        tmp_path, output, ckpt, backend="ray", environment={"PAUSE_AT_STEP": str(pause_at)}
    )


def assert_preempted_at(job_dir: Path, out: str, ckpt: Path, step: int) -> None:
    assert re.search(rf"^preempted: final checkpoint at step {step} in \d+\.\d s$", out, re.M)
    assert json.loads((job_dir / "summary.json").read_text())["state"] == "preempted"
    assert latest_checkpoint(ckpt) == step
    assert_cluster_gone(job_dir)
    assert_nothing_left(job_dir)


def test_a_ray_block_on_another_backend_is_refused(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "contract.py", ray={"address": "127.0.0.1:6379"})
    done = tenter("run", str(spec))
    assert done.returncode == 2
    assert "ray.address" in done.stderr and "set backend: ray" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_detached_ray_job_is_a_ray_job_that_status_logs_and_cancel_reach(
    tmp_path: Path, tenter_home: Path
) -> None:
    runtime_env = {"env_vars": {"SEEN_BY_RANKS": "yes"}}
    spec = write_spec(
        tmp_path, "block.py", backend="ray", instance_count=2, ray={"runtime_env": runtime_env}
    )
    started = tenter("run", "--detach", str(spec), timeout=30)
    assert started.returncode == 0, started.stderr
    job_dir = tenter_home / "jobs" / started.stdout.strip()
    # The launcher runs as a Ray job, as the plan shows it.
    submitted = json.loads(json.loads((job_dir / "plan.json").read_text())["files"]["ray-job.json"])
    assert submitted["entrypoint"][1:] == ["-m", ENTRYPOINT, str(job_dir)]
    assert submitted["runtime_env"] == runtime_env
    wait_for_ready(job_dir, 2)
    assert f"job {job_dir.name}: RUNNING (" in tenter("status", job_dir.name).stdout
    launcher = (job_dir / "logs" / "launcher.log").read_text()
    assert f"submitted Ray job {job_dir.name} to http://127.0.0.1:" in launcher
    assert "rendezvous: 2 hosts (algo-1, algo-2), world size 2" in launcher
    logs = tenter("logs", job_dir.name).stdout
    assert "[algo-2,1]<stdout>: ready 1 SEEN_BY_RANKS=yes" in logs

    stopped = tenter("cancel", job_dir.name)
    assert stopped.returncode == 0 and "stopped its launcher" in stopped.stdout
    after = tenter("status", job_dir.name).stdout
    assert f"job {job_dir.name}: FAILED (exit 130)" in after and "was interrupted" in after
    assert_cluster_gone(job_dir)
    assert_nothing_left(job_dir)
