"""The GPU check suite (``make test-gpu``): every CUDA path of tenter on the GPUs of this
machine. Skipped without CUDA (tests/conftest.py); the rules these paths follow are tested on
CPU-only machines with fake GPU counts (tests/cli/test_gpus_cli.py, tests/spec/test_gpus.py).

One GPU: worlds of one rank per GPU; two or more: two simulated hosts on disjoint GPUs."""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from tenter.errors import ExitCode
from tenter.perf.parse import parse_log
from tests.conftest import REPO, SCRIPTS, Background, assert_nothing_left, job_checkpoints, tenter

pytestmark = [pytest.mark.cuda, pytest.mark.slow]

HERE = Path(__file__).parent / "scripts"
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
HOSTS = 2 if GPUS >= 2 else 1
"""Two simulated hosts where there are GPUs for both, each with its share."""
PER_HOST = max(1, GPUS // HOSTS)
ON_GPUS = ["--hosts", str(HOSTS), "--procs-per-host", str(PER_HOST), "--instance-type", "local_gpu"]


def gpu_job(tmp_path: Path, script: str, *args: str, **fields: Any) -> str:
    """A job spec of ``script`` on the GPUs (one per rank, simulated hosts on disjoint ones)."""
    spec = tmp_path / "job.yaml"
    job = {
        "entry_point": script,
        "args": list(args),
        "instance_count": HOSTS,
        "processes_per_host": PER_HOST,
        "instance_type": "local_gpu",
        **fields,
    }
    spec.write_text(json.dumps(job))  # JSON is YAML
    return str(spec)


def records(out: Path, ranks: int) -> list[dict[str, Any]]:
    return [json.loads((out / f"rank-{rank}.json").read_text()) for rank in range(ranks)]


def test_nccl_runs_on_every_gpu_and_simulated_hosts_never_share_one(tmp_path: Path) -> None:
    done = tenter("run", *ON_GPUS, str(HERE / "on_gpu.py"), str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    ranks = records(tmp_path / "out", HOSTS * PER_HOST)
    assert all(r["device"] == f"cuda:{i % PER_HOST}" for i, r in enumerate(ranks)), ranks
    assert all(r["cuda_sum_ok"] and r["cpu_sum_ok"] for r in ranks), ranks
    assert len({r["uuid"] for r in ranks}) == len(ranks), ranks  # one GPU each, none shared
    assert_nothing_left(done.job_dir)


def test_a_gpu_job_with_more_ranks_than_gpus_is_refused_before_it_starts() -> None:
    done = tenter("run", "--hosts", str(GPUS + 1), "--instance-type", "local_gpu", "x.py")
    assert done.returncode == 2, done.stderr
    assert f"need a GPU each and this machine has {GPUS} GPU" in done.stderr


def test_a_cpu_job_with_more_ranks_than_gpus_runs_on_the_cpu(tmp_path: Path) -> None:
    ranks = GPUS + 1
    out = tmp_path / "out"
    done = tenter("run", "--nproc-per-node", str(ranks), str(HERE / "on_gpu.py"), str(out))
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("the ranks run without GPUs") == 1, done.stderr
    assert all(r["device"] == "cpu" and r["visible"] == "" for r in records(out, ranks))


def test_tenter_comm_routes_cuda_tensors_to_nccl_and_cpu_tensors_to_shared_memory(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    spec = gpu_job(tmp_path, str(HERE / "on_gpu.py"), str(out), process_group_backend="tenter")
    done = tenter("run", spec)
    assert done.returncode == 0, done.stderr
    ranks = records(out, HOSTS * PER_HOST)
    assert all(r["backend"] == "tenter" for r in ranks), ranks
    assert all(r["cuda_sum_ok"] and r["cpu_sum_ok"] for r in ranks), ranks


def test_perf_device_cuda_writes_its_json_with_no_wrong_value(tmp_path: Path) -> None:
    results = tmp_path / "all_reduce.json"
    done = tenter(
        "perf", "all_reduce", "--device", "cuda", "-b", "8", "-e", "16M", "-f", "8",
        "-J", str(results), "--hosts", str(HOSTS), "--procs-per-host", str(PER_HOST),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    log = parse_log(done.stdout)
    assert [r.size for r in log.rows] == [8, 64, 512, 4096, 32768, 262144, 2097152, 16777216]
    assert all(h.wrong == "0" for r in log.rows for h in r.halves), done.stdout
    doc = json.loads(results.read_text())
    assert len(doc["results"]) == len(log.rows)


@pytest.mark.parametrize("tp", sorted({1, min(2, GPUS)}))
def test_gpt_trains_with_fsdp2_and_tensor_parallel_in_bf16(tmp_path: Path, tp: int) -> None:
    ranks = HOSTS * PER_HOST
    parameters = {
        "pipeline_parallel_degree": 1,
        "sharded_data_parallel_degree": ranks // tp,
        "tensor_parallel_degree": tp,
    }
    spec = gpu_job(
        tmp_path,
        str(REPO / "examples" / "gpt" / "train.py"),
        hyperparameters={"steps": 40, "microbatches": 1},
        distribution={
            "torch_distributed": {"enabled": True},
            "smdistributed": {
                "modelparallel": {"enabled": True, "parameters": {**parameters, "bf16": True}}
            },
        },
        logs={"ranks": [0]},
    )
    done = tenter("run", spec, timeout=600)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1].split(": ", 1)[1])
    assert result["tp"] == tp and result["dp"] == ranks // tp
    assert result["last_loss"] < result["first_loss"]


def test_a_checkpoint_of_cuda_tensors_resumes_exactly(tmp_path: Path) -> None:
    out, ckpt = tmp_path / "out", {"dir": str(tmp_path / "ckpt")}
    script = str(HERE / "cuda_checkpoint.py")
    for steps in (4, 6):
        spec = gpu_job(tmp_path, script, str(out), "--steps", str(steps), checkpoint=ckpt)
        done = tenter("run", spec)
        assert done.returncode == 0, done.stderr
    saved, resumed = torch.load(out / "run-0.pt"), torch.load(out / "run-4.pt")
    assert resumed["start"] == 4
    for name, value in saved["final"].items():
        assert resumed["resumed"][name].is_cuda
        assert torch.equal(resumed["resumed"][name], value), name


def test_a_cuda_job_is_preempted_after_one_final_checkpoint(tmp_path: Path) -> None:
    script = str(SCRIPTS / "ignores_preemption.py")
    job = Background("run", gpu_job(tmp_path, script, checkpoint={"preemption_grace": 120}))
    job.wait_for("ready", count=HOSTS * PER_HOST)
    signalled = time.monotonic()
    job.proc.send_signal(signal.SIGTERM)
    out = job.finish(timeout=120)
    assert job.proc.returncode == ExitCode.PREEMPTED, out
    assert time.monotonic() - signalled < 60, out
    final = re.search(r"^preempted: final checkpoint at step (\d+) in", out, re.M)
    assert final, out
    manifest = json.loads((job_checkpoints(job.job_dir) / "manifest.json").read_text())
    assert [c["step"] for c in manifest["checkpoints"]] == [int(final[1])]
    assert_nothing_left(job.job_dir)


def test_doctor_passes_its_gpu_checks() -> None:
    done = tenter("doctor", "--json", "--instance-type", "local_gpu")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    (host,) = report["hosts"]
    found = {c["check"]: c for c in host["checks"]}
    assert found["gpus"]["status"] == "pass", found["gpus"]
    assert torch.cuda.get_device_name(0) in found["gpus"]["found"]
    assert found["nccl"]["status"] == "pass", found["nccl"]
