"""An MPIJob's launcher pod entry (:mod:`tenter.launch.backends.kubernetes.mpi_launcher`): given
the job as the manifest carries it, it makes the plan and mpirun's command, serves the ranks' store
and each rank's environment on the pod's address only, never on all interfaces, and runs
mpirun. Real Open MPI runs on this machine, a loopback address of its own standing in for the
pod's and ``localhost`` for every worker."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from tenter.launch.backends.kubernetes.mpi_job import (
    JOB_ENV,
    POD_IP_ENV,
    MpiJobLaunch,
    job_json,
)
from tenter.runtime.mpi_shim import GIVEN_ENV, PLAN_ENV, planned_env
from tenter.spec import load
from tests.launch.kubernetes.k8s_specs import JOB_ID, dryrun, launcher_job, p5_spec

POD_IP = "127.0.0.2"
HOSTS, PROCS = 2, 2
RANK = """
import datetime, json, os, sys
import psutil
import torch.distributed as dist

store = dist.TCPStore(
    os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
    timeout=datetime.timedelta(seconds=60),
)
store.add("ranks", 1)
store.set(f"rank-{os.environ['RANK']}", "here")
store.wait([f"rank-{r}" for r in range(int(os.environ["WORLD_SIZE"]))])
launcher = next(
    p for p in psutil.Process().parents() if "mpi_launcher" in " ".join(p.cmdline())
)
listening = sorted({c.laddr.ip for c in launcher.net_connections("tcp") if c.status == "LISTEN"})
seen = {"env": dict(os.environ), "store": store.add("ranks", 0), "listening": listening}
with open(os.path.join(os.environ["OUT_DIR"], f"rank-{os.environ['RANK']}.json"), "w") as out:
    json.dump(seen, out)
sys.exit(int(os.environ.get("EXIT_CODE", "0")))
"""


def _job(tmp_path: Path, **environment: str) -> MpiJobLaunch:
    (tmp_path / "rank.py").write_text(RANK)
    data: dict[str, Any] = {
        "name": "mpijob",
        "entry_point": "rank.py",
        "source_dir": str(tmp_path),
        "instance_count": HOSTS,
        "instance_type": "ml.c5.18xlarge",
        "processes_per_host": PROCS,
        "distribution": {
            "mpi": {
                "enabled": True,
                # Every worker is this machine: its loopback, and more ranks than its cores.
                "custom_mpi_options": "--oversubscribe --mca btl_tcp_if_include lo "
                "--mca oob_tcp_if_include lo",
            }
        },
        "environment": {"OUT_DIR": str(tmp_path), **environment},
        "backend": "kubernetes",
        "kubernetes": {"image": "train:1.0", "python": sys.executable},
    }
    spec, _ = load(data, tmp_path)
    in_pod = spec.model_copy(update={"source_dir": str(tmp_path), "output_dir": None})
    return MpiJobLaunch(in_pod, JOB_ID, PROCS, "localhost", str(tmp_path / "home"))


def _launch(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "tenter.launch.backends.kubernetes.mpi_launcher", *argv]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)


def test_every_rank_gets_the_plans_environment_and_the_launcher_listens_on_the_pod_only(
    tmp_path: Path,
) -> None:
    job = _job(tmp_path)
    done = _launch({**os.environ, POD_IP_ENV: POD_IP, JOB_ENV: job_json(job)})
    assert done.returncode == 0, done.stderr
    # Each rank's own file: mpirun forwards the ranks' output in chunks that may interleave.
    seen = [json.loads((tmp_path / f"rank-{r}.json").read_text()) for r in range(HOSTS * PROCS)]
    port = int(seen[0]["env"]["MASTER_PORT"])
    plan = job.plan(port)
    for rank, rank_seen in enumerate(seen):
        env = rank_seen["env"]
        given = set(env.get(GIVEN_ENV, "").split(",")) - {""}
        assert not given, "the shim takes out how the contract came"
        planned = planned_env(plan, rank)
        assert {k: env.get(k) for k in planned if k != "MASTER_ADDR"} == {
            k: v for k, v in planned.items() if k != "MASTER_ADDR"
        }
        assert (env["MASTER_ADDR"], env["SM_CURRENT_HOST"]) == (POD_IP, f"algo-{rank // 2 + 1}")
        assert (rank_seen["store"], rank_seen["listening"]) == (HOSTS * PROCS, [POD_IP])


def test_a_failing_rank_is_the_launchers_status(tmp_path: Path) -> None:
    job = _job(tmp_path, EXIT_CODE="7")
    done = _launch({**os.environ, POD_IP_ENV: POD_IP, JOB_ENV: job_json(job)})
    assert done.returncode == 7, done.stderr


def test_the_job_in_the_mpijob_manifest_is_the_spec_it_was_rendered_from() -> None:
    spec = p5_spec(distribution={"pytorchddp": {"enabled": True}})
    [mpijob] = dryrun(spec).materialize()
    job = launcher_job(mpijob)
    assert job.spec == spec.model_copy(update={"source_dir": "/opt/ml/code", "output_dir": None})
    assert job.hosts() == [f"{JOB_ID}-worker-{i}.{JOB_ID}.ml.svc" for i in range(2)]
    # SMDDP is an MPIJob: its ranks get the process group backend the spec chose.
    assert planned_env(job.plan(29500), 15)["TENTER_PG_BACKEND"] == "tenter"


def test_without_the_job_or_the_pod_address_nothing_runs_and_the_error_says_what_to_set(
    tmp_path: Path,
) -> None:
    job = job_json(_job(tmp_path))
    base = {k: v for k, v in os.environ.items() if k not in (POD_IP_ENV, JOB_ENV)}
    for env in ({**base, JOB_ENV: job}, {**base, POD_IP_ENV: POD_IP}):
        done = _launch(env)
        assert done.returncode == 2
        assert f"{POD_IP_ENV}=<the pod's address> {JOB_ENV}=<the job>" in done.stderr
        assert "Traceback" not in done.stderr
    broken = json.loads(job)
    broken["spec"]["instance_count"] = "many"
    done = _launch({**base, POD_IP_ENV: POD_IP, JOB_ENV: json.dumps(broken)})
    assert done.returncode == 2
    assert f"{JOB_ENV} is not a job tenter rendered" in done.stderr
    assert "instance_count" in done.stderr
    assert "Traceback" not in done.stderr
    assert not list(tmp_path.glob("rank-*.json"))


def test_a_rank_that_cannot_reach_the_launcher_says_where_it_looked(tmp_path: Path) -> None:
    with socket.socket() as closed:  # bound, never listening: a connection is refused
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        env = {**os.environ, PLAN_ENV: url, "OMPI_COMM_WORLD_RANK": "3"}
        done = subprocess.run(
            [sys.executable, "-m", "tenter.runtime.mpi_shim", "touch", str(tmp_path / "ran")],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 1
    assert done.stderr.startswith(
        f"error: rank 3 could not fetch its environment from {url}/rank/3"
    )
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "ran").exists()
