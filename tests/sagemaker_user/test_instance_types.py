"""A SageMaker user's first day, items 1-2 (issue 39): ``SM_NUM_GPUS``/``SM_NUM_CPUS`` are the
host's share of this machine where the hosts are simulated on it, and the catalog has every
SageMaker training type with accelerators, a user catalog for the rest, and a did-you-mean
within the family. The job script is the SDK guide's kind: no tenter imports."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from tenter import Estimator
from tenter.spec import SpecError, load, lookup
from tests.conftest import assert_nothing_left, job_dirs, tenter

# The SageMaker SDK guide's way to pick the device (using_pytorch.rst): SM_NUM_GPUS decides.
GUIDE_SCRIPT = """\
import argparse, json, os
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--num-gpus", type=int, default=os.environ["SM_NUM_GPUS"])
args = parser.parse_args()
device = "cuda" if args.num_gpus > 0 else "cpu"
total = float(torch.ones(2, device=device).sum())
seen = {k: os.environ[k] for k in ("SM_NUM_GPUS", "SM_NUM_CPUS")}
with open(os.path.join(os.environ["SM_OUTPUT_DATA_DIR"], "seen.json"), "w") as f:
    json.dump({"device": device, "total": total, **seen}, f)
"""


def _seen(job_dir: Path) -> dict[str, object]:
    result: dict[str, object] = json.loads(
        (job_dir / "hosts/algo-1/output/data/seen.json").read_text()
    )
    return result


@pytest.mark.slow
def test_a_gpu_type_runs_the_guides_script_on_the_cpu_of_a_machine_without_gpus(
    tmp_path: Path,
    tenter_home: Path,
    fake_gpus: Callable[[int], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_gpus(0)  # this machine, as tenter's catalog sees it, has no GPU
    (tmp_path / "train.py").write_text(GUIDE_SCRIPT)
    share = str(os.cpu_count() or 1)  # one host: all of the machine
    expected = {"device": "cpu", "total": 2.0, "SM_NUM_GPUS": "0", "SM_NUM_CPUS": share}

    # tenter run: the preflight lets it start (was: "at most 0" processes per host, exit 2)
    run = tenter("run", "--instance-type", "ml.p3.2xlarge", "train.py", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    (cli_job,) = job_dirs(tenter_home / "jobs")
    assert _seen(cli_job) == expected

    # the Estimator: the same job, the same answer
    monkeypatch.chdir(tmp_path)
    with pytest.warns(UserWarning, match="framework_version"):
        est = Estimator("train.py", instance_type="ml.p3.2xlarge", framework_version="2.5")
    est.fit()
    assert est.latest_training_job is not None
    estimator_job = Path(est.latest_training_job.job_dir)
    assert _seen(estimator_job) == expected
    assert_nothing_left(estimator_job)


def test_the_plan_shows_the_share_beside_the_catalogs_figure(
    tmp_path: Path, fake_gpus: Callable[[int], Path]
) -> None:
    fake_gpus(2)
    (tmp_path / "train.py").write_text(GUIDE_SCRIPT)
    flags = ["--instance-type", "ml.p3.8xlarge", "--hosts", "2", "--procs-per-host", "1"]
    plan = tenter("plan", *flags, "train.py", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    cpus = max(1, (os.cpu_count() or 1) // 2)
    # each simulated host has one of the 2 GPUs, and half the cores
    assert "SM_NUM_GPUS=1  (ml.p3.8xlarge has 4; this machine's share: 1)" in plan.stdout
    assert f"SM_NUM_CPUS={cpus}  (ml.p3.8xlarge has 32; this machine's share: {cpus})" in (
        plan.stdout
    )
    # a cluster's hosts are the type's own
    slurm = tenter("plan", *flags, "--backend", "slurm", "train.py", cwd=tmp_path)
    assert slurm.returncode == 0, slurm.stderr
    assert "  SM_NUM_GPUS=4\n" in slurm.stdout and "  SM_NUM_CPUS=32\n" in slurm.stdout


@pytest.mark.parametrize(
    "family, sizes",
    [
        ("g4dn", ["xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge"]),
        ("g5", ["xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "24xlarge"]),
        ("g6", ["xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "16xlarge", "48xlarge"]),
        ("g6e", ["xlarge", "2xlarge", "4xlarge", "8xlarge", "12xlarge", "24xlarge", "48xlarge"]),
        ("p5e", ["48xlarge"]),
        ("p5en", ["48xlarge"]),
        ("p6-b200", ["48xlarge"]),
        ("trn1", ["2xlarge", "32xlarge"]),
        ("trn2", ["48xlarge"]),
    ],
)
def test_common_accelerated_types_are_in_the_catalog(family: str, sizes: list[str]) -> None:
    for size in sizes:
        itype = lookup(f"ml.{family}.{size}")
        assert itype is not None, f"ml.{family}.{size}"
        assert itype.gpus > 0 or itype.neuron_cores > 0


def test_the_estimator_takes_a_g5_12xlarge_with_its_four_gpus(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(GUIDE_SCRIPT)
    est = Estimator("train.py", source_dir=str(tmp_path), instance_type="ml.g5.12xlarge")
    itype = lookup(est.spec.instance_type)
    assert itype is not None and (itype.gpus, itype.gpu_model, itype.cpus) == (4, "A10G", 48)


def test_a_misspelt_size_is_matched_within_its_family(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    with pytest.raises(SpecError) as info:
        load({"entry_point": "train.py", "instance_type": "ml.g5.12xlarg"}, tmp_path)
    message = str(info.value)
    assert "Did you mean 'ml.g5.12xlarge'?" in message
    assert "ml.g5 sizes: ml.g5.xlarge, " in message and "ml.m5" not in message
    assert "tenter's catalog is of 20" in message and "docs/spec.md" in message


def test_a_user_catalog_adds_a_type_and_a_bad_one_is_refused(
    tmp_path: Path, tenter_home: Path
) -> None:
    (tmp_path / "train.py").write_text("")
    catalog = tenter_home / "instance_types.yaml"
    catalog.parent.mkdir(parents=True, exist_ok=True)
    catalog.write_text(
        "types:\n  ml.x9.2xlarge: {gpus: 2, gpu_model: X9, cpus: 16, memory_gib: 128}\n"
    )
    plan = tenter("plan", "--instance-type", "ml.x9.2xlarge", "train.py", cwd=tmp_path)
    assert plan.returncode == 0, plan.stderr
    assert "size        1 host x 2 processes = 2 ranks" in plan.stdout

    catalog.write_text("types:\n  ml.x9.2xlarge: {gpus: two, cpus: 16, memory_gib: 128}\n")
    run = tenter("run", "--instance-type", "ml.x9.2xlarge", "train.py", cwd=tmp_path)
    assert run.returncode == 2
    assert f"{catalog}: types.ml.x9.2xlarge.gpus: " in run.stderr, run.stderr
    assert "docs/spec.md" in run.stderr and "Traceback" not in run.stderr
    assert not (tenter_home / "jobs").exists()
