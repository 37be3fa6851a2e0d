"""A SageMaker user's first day (issue 39, items 5-7): every shipped example, run as its doc says
with as few steps as it runs with, succeeds with its steps counted (goodput above 0: DDP,
FSDP2 and pipelines through tenter.parallel, torchft's committed steps), with no torch warning
for the user to interpret, and a fault-free torchft run reports no heal."""

from __future__ import annotations

import json

import pytest

from tests.conftest import REPO, Finished, assert_nothing_left, tenter, warning_lines

pytestmark = pytest.mark.slow

EXAMPLES = REPO / "examples"


def assert_clean_run_with_steps(done: Finished) -> None:
    assert done.returncode == 0, done.stderr
    assert warning_lines(done.job_dir, done.stdout, done.stderr) == []
    goodput = json.loads((done.job_dir / "summary.json").read_text())["goodput"]
    assert goodput["goodput"] > 0, goodput
    assert goodput["productive_steps"] > 0, goodput
    assert "no rank reported a step" not in done.stdout
    assert_nothing_left(done.job_dir)


@pytest.mark.parametrize("spec", ["job.yaml", "job-v2.yaml"])
def test_the_gpt_examples_count_their_pipeline_and_fsdp2_steps_without_warnings(spec: str) -> None:
    done = tenter("run", str(EXAMPLES / "gpt" / spec), "--hp", "steps=6", "--hp", "layers=2")
    assert_clean_run_with_steps(done)


def test_the_torchft_example_counts_committed_steps_and_reports_no_heal_without_a_fault() -> None:
    done = tenter("run", str(EXAMPLES / "torchft" / "job.yaml"), "--hp", "steps=30")
    assert_clean_run_with_steps(done)
    events = (done.job_dir / "events.jsonl").read_text()
    assert "replica_healed" not in events
    assert "healed" not in done.stdout
    # Each group's steps under its own job-wide rank, numbered as torchft committed them.
    for rank in (0, 1):
        lines = (done.job_dir / f"metrics/steps/rank-{rank}.jsonl").read_text().splitlines()
        assert json.loads(lines[-1])["step"] == 30


def test_the_digits_example_counts_its_ddp_steps_without_warnings() -> None:
    done = tenter("run", str(EXAMPLES / "digits" / "job.yaml"), "--hp", "epochs=1")
    assert_clean_run_with_steps(done)


def test_the_elastic_example_counts_its_ddp_steps_without_warnings() -> None:
    train = str(EXAMPLES / "elastic" / "train.py")
    done = tenter("run", "--hosts", "2", "--procs-per-host", "1", train, "--", "--epochs", "1")
    assert_clean_run_with_steps(done)


VISION = REPO / ".venv-vision"
"""examples/imagenet's venv (`make vision`, which `make test` runs): torchvision must match its
torch build, and the locked torch 2.13.0+cpu has none, so the example runs beside a torch that
has one (requirements/vision.txt)."""


def test_the_imagenet_example_on_synthetic_images_reports_its_steps_without_warnings() -> None:
    if not (VISION / "bin" / "tenter").exists():
        pytest.fail(f"examples/imagenet runs in {VISION}, which is not built: run `make vision`")
    train = str(EXAMPLES / "imagenet" / "imagenet_ddp.py")
    done = tenter(
        "run", "--hosts", "2", "--procs-per-host", "1", train,
        "--", "--synthetic", "--image-size", "32", "--batch-size", "4",
        "--steps-per-epoch", "3", "--epochs", "1",
        python=VISION / "bin" / "python",
    )  # fmt: skip
    assert_clean_run_with_steps(done)
    assert "epoch   1" in done.stdout
