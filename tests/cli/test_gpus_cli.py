"""The GPU rules of simulated hosts through the CLI, on 1, 2 and 8 fake GPUs (the driver's
/proc listing pointed at a fixture, see ``fake_gpus``): each host gets GPUs of its own; a job
that asks for a GPU per rank and has more ranks than GPUs is refused before anything starts;
one that does not ask runs, on the CPU when the GPUs are too few, saying so once."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tenter.contract.plan import Plan
from tests.conftest import REPO, SCRIPTS, tenter

DUMP_ENV = str(SCRIPTS / "dump_env.py")
CPU_NOTE = "the ranks run without GPUs (CUDA_VISIBLE_DEVICES='')"


def plan(*args: str) -> dict[str, Any]:
    done = tenter("plan", "--json", *args)
    assert done.returncode == 0, done.stderr
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def host_envs(data: dict[str, Any]) -> list[dict[str, str]]:
    """Per host: its whole environment (the plan's shared one and the host's own)."""
    whole = Plan.from_json(json.dumps(data))
    return [whole.host_env(h) for h in whole.hosts]


def host_gpus(data: dict[str, Any]) -> list[tuple[list[str] | None, str | None]]:
    """Per host: its planned GPUs and its CUDA_VISIBLE_DEVICES."""
    return [
        (h["gpus"], env.get("CUDA_VISIBLE_DEVICES"))
        for h, env in zip(data["hosts"], host_envs(data), strict=True)
    ]


def refused(*args: str) -> str:
    done = tenter(*args)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    assert not (Path(os.environ["TENTER_HOME"]) / "jobs").exists()  # nothing created
    return done.stderr


@pytest.mark.parametrize(
    ("gpus", "args", "expected"),
    [
        (1, ["--instance-type", "local_gpu"], [["0"]]),
        (2, ["--hosts", "2", "--nproc-per-node", "gpu"], [["0"], ["1"]]),
        (2, ["--procs-per-host", "2", "--instance-type", "local_gpu"], [["0", "1"]]),
        (
            8,
            ["--hosts", "2", "--nproc-per-node", "gpu"],
            [["0", "1", "2", "3"], ["4", "5", "6", "7"]],
        ),
        (8, ["--hosts", "2", "--procs-per-host", "2"], [["0", "1"], ["2", "3"]]),
        (8, ["--hosts", "8", "--instance-type", "local_gpu"], [[str(i)] for i in range(8)]),
        # local's default: one process per GPU of the host's share
        (8, ["--hosts", "4"], [["0", "1"], ["2", "3"], ["4", "5"], ["6", "7"]]),
    ],
)
def test_plan_gives_each_host_its_own_gpus_if_the_ranks_fit(
    fake_gpus: Callable[[int], Path], gpus: int, args: list[str], expected: list[list[str]]
) -> None:
    fake_gpus(gpus)
    data = plan(*args, DUMP_ENV)
    assert host_gpus(data) == [(ids, ",".join(ids)) for ids in expected]
    assert [env["SM_NUM_GPUS"] for env in host_envs(data)] == [str(len(i)) for i in expected]
    assert data["gpu_note"] == ""
    text = tenter("plan", *args, DUMP_ENV).stdout
    assert "gpus        one per rank: each host sees its own as cuda:0, cuda:1, ..." in text
    assert f"/hosts/algo-1  GPUs {','.join(expected[0])}\n" in text


@pytest.mark.parametrize(
    ("gpus", "args", "fix"),
    [
        (1, ["--hosts", "2", "--instance-type", "local_gpu"], "--hosts 1 --procs-per-host 1"),
        (1, ["--hosts", "2", "--nproc-per-node", "gpu"], "--hosts 1 --procs-per-host 1"),
        (1, ["--procs-per-host", "2", "--instance-type", "local_gpu"], "--procs-per-host 1"),
        (
            2,
            ["--hosts", "2", "--procs-per-host", "2", "--instance-type", "local_gpu"],
            "--procs-per-host 1",
        ),
        (
            8,
            ["--hosts", "2", "--procs-per-host", "8", "--instance-type", "local_gpu"],
            "--procs-per-host 4",
        ),
        (8, ["--hosts", "16", "--nproc-per-node", "gpu"], "--hosts 8 --procs-per-host 1"),
    ],
)
def test_plan_and_run_refuse_a_gpu_job_if_its_ranks_outnumber_the_gpus(
    fake_gpus: Callable[[int], Path], gpus: int, args: list[str], fix: str
) -> None:
    fake_gpus(gpus)
    for verb in ("plan", "run"):
        err = refused(verb, *args, DUMP_ENV, "out")
        assert "ranks need a GPU each and this machine has" in err, err
        assert f"{fix} " in err and "instance_type: local" in err, err


@pytest.mark.parametrize(
    ("gpus", "args"),
    [
        (1, ["--procs-per-host", "2"]),
        (1, ["--nproc-per-node", "2"]),
        (2, ["--hosts", "2", "--procs-per-host", "2"]),
        (8, ["--hosts", "3", "--procs-per-host", "3"]),
    ],
)
def test_plan_runs_a_cpu_job_without_gpus_if_its_ranks_outnumber_them(
    fake_gpus: Callable[[int], Path], gpus: int, args: list[str]
) -> None:
    fake_gpus(gpus)
    data = plan(*args, DUMP_ENV)
    assert host_gpus(data) == [([], "")] * len(data["hosts"])
    assert {env["SM_NUM_GPUS"] for env in host_envs(data)} == {"0"}
    assert CPU_NOTE in data["gpu_note"]


def test_run_gives_each_simulated_host_its_own_gpus(
    fake_gpus: Callable[[int], Path], tmp_path: Path
) -> None:
    fake_gpus(8)
    out = tmp_path / "out"
    done = tenter("run", "--hosts", "2", "--procs-per-host", "2", DUMP_ENV, str(out))
    assert done.returncode == 0, done.stderr
    assert "GPUs" not in done.stderr
    seen = {
        rank: json.loads((out / f"rank-{rank}.json").read_text())["env"]["CUDA_VISIBLE_DEVICES"]
        for rank in range(4)
    }
    assert seen == {0: "0,1", 1: "0,1", 2: "2,3", 3: "2,3"}


def test_run_says_once_that_a_cpu_job_runs_without_gpus(
    fake_gpus: Callable[[int], Path], tmp_path: Path
) -> None:
    fake_gpus(1)
    out = tmp_path / "out"
    done = tenter("run", "--nproc-per-node", "2", DUMP_ENV, str(out))
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(CPU_NOTE) == 1, done.stderr
    assert "--procs-per-host 1 (processes_per_host: 1) gives each rank one" in done.stderr
    for rank in range(2):
        env = json.loads((out / f"rank-{rank}.json").read_text())["env"]
        assert env["CUDA_VISIBLE_DEVICES"] == ""


@pytest.mark.slow
def test_the_demo_runs_on_a_machine_of_one_gpu(fake_gpus: Callable[[int], Path]) -> None:
    fake_gpus(1)
    # One epoch of the demo's 20: the GPUs, and the note, are settled before its first step.
    demo = str(REPO / "examples" / "digits" / "job.yaml")
    done = tenter("run", demo, "--hp", "epochs=1", timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stderr.count(CPU_NOTE) == 1, done.stderr


def test_perf_refuses_cuda_buffers_if_the_ranks_outnumber_the_gpus(
    fake_gpus: Callable[[int], Path],
) -> None:
    fake_gpus(1)
    err = refused("perf", "all_reduce", "--device", "cuda", "-b", "8", "-e", "8")
    assert "2 ranks need a GPU each and this machine has 1 GPU" in err, err


def test_perf_on_cpu_runs_with_more_ranks_than_gpus(fake_gpus: Callable[[int], Path]) -> None:
    fake_gpus(1)
    done = tenter("perf", "all_reduce", "-b", "8", "-e", "8", "-n", "2", "-w", "1")
    assert done.returncode == 0, done.stderr
    assert CPU_NOTE in done.stderr
