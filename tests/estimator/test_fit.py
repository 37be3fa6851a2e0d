"""fit() runs real jobs: the SDK guide's examples unchanged (``from tenter import Estimator as
PyTorch``), a blocking fit that raises with the root cause, and a detached one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tenter import Estimator, JobFailedError
from tenter import Estimator as PyTorch
from tests.conftest import SCRIPTS, assert_nothing_left

EXAMPLES = Path(__file__).parent / "scripts"


def data_dirs(root: Path, *names: str) -> list[str]:
    """A folder per channel, each holding one file named after it."""
    paths = []
    for name in names:
        (root / name).mkdir(parents=True)
        (root / name / f"{name}.csv").write_text("1,2\n")
        paths.append(str(root / name))
    return paths


def run_the_guides_estimator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> PyTorch:
    """using_pytorch.rst, "Create an Estimator", run unchanged in the folder of its script
    (pytorch-train.py), with local folders for its S3 prefixes."""
    train, test = data_dirs(tmp_path, "train", "test")
    monkeypatch.chdir(EXAMPLES)
    with pytest.warns(UserWarning, match=r"ignored by tenter .*: framework_version, py_version$"):
        pytorch_estimator = PyTorch('pytorch-train.py',
                                    instance_type='ml.p3.2xlarge',
                                    instance_count=1,
                                    framework_version='1.8.0',
                                    py_version='py3',
                                    hyperparameters = {'epochs': 20, 'batch-size': 64, 'learning-rate': 0.1})  # fmt: skip  # noqa: E501
    pytorch_estimator.fit({'train': f'file://{train}',
                           'test': f'file://{test}'})  # fmt: skip
    return pytorch_estimator


@pytest.mark.slow
def test_the_guides_estimator_example_runs_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytorch_estimator = run_the_guides_estimator(tmp_path, monkeypatch)
    job = pytorch_estimator.latest_training_job
    assert job is not None and job.describe()["TrainingJobStatus"] == "Completed"
    output = Path(job.job_dir) / "hosts/algo-1/output/data"
    seen = json.loads((output / "seen.json").read_text())
    assert seen == {
        "epochs": 20,
        "batch_size": 64,
        "learning_rate": 0.1,
        "train": ["train.csv"],
        "test": ["test.csv"],
    }
    assert (Path(pytorch_estimator.model_data) / "model.pth").stat().st_size > 0
    assert_nothing_left(Path(job.job_dir))


@pytest.mark.slow
def test_the_guides_ddp_example_runs_unchanged_on_local_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tenter_home: Path
) -> None:
    (data,) = data_dirs(tmp_path, "data")
    monkeypatch.chdir(EXAMPLES)
    # using_pytorch.rst, "Launching a Distributed Training Job": 2 x ml.p4d.24xlarge, so
    # 2 hosts of 8 processes, here on CPU.
    with pytest.warns(UserWarning, match="framework_version, py_version, role"):
        pt_estimator = PyTorch(
            entry_point="train_ptddp.py",
            role="SageMakerRole",
            framework_version="1.12.0",
            py_version="py38",
            instance_count=2,
            instance_type="ml.p4d.24xlarge",
            distribution={
                "pytorchddp": {
                    "enabled": True
                }
            }
        )  # fmt: skip
    with pytest.raises(ValueError, match="aws s3 sync s3://bucket/path/to/training/data DIR"):
        pt_estimator.fit("s3://bucket/path/to/training/data")
    assert not (tenter_home / "jobs").exists()  # refused before anything was created

    pt_estimator.fit(f"file://{data}")
    found = json.loads((Path(pt_estimator.model_data) / "grad.json").read_text())
    # Rank r feeds inputs of r: the averaged gradient is the mean rank times the batch of 2.
    assert found == {"world": 16, "grad": [[2 * 7.5] * 4]}


@pytest.mark.slow
def test_fit_runs_the_job_with_its_channels_and_hyperparameters() -> None:
    est = Estimator(
        entry_point="contract.py",
        source_dir=str(SCRIPTS),
        instance_count=2,
        instance_type="local",
        hyperparameters={"epochs": 3},
        distribution={"torch_distributed": {"enabled": True}},
    )
    est.fit({"training": str(SCRIPTS)})
    assert est.latest_job is est.latest_training_job and est.jobs == [est.latest_job]
    job_dir = Path(est.latest_training_job.job_dir)
    seen = json.loads((job_dir / "hosts/algo-2/output/data/rank-1.json").read_text())
    assert seen["argv"] == ["--epochs", "3"]
    assert seen["env"]["SM_CHANNEL_TRAINING"] == str(job_dir / "hosts/algo-2/input/data/training")
    assert est.model_data == str(job_dir / "hosts/algo-1/model")
    assert_nothing_left(job_dir)


@pytest.mark.slow
def test_fit_raises_with_the_root_cause_if_the_job_fails() -> None:
    est = Estimator(
        entry_point="fail.py",
        source_dir=str(SCRIPTS),
        instance_count=2,
        processes_per_host=2,
        environment={"FAIL_MODE": "raise"},
    )
    with pytest.raises(JobFailedError, match="root cause: rank 3 on host algo-2") as info:
        est.fit()
    assert "ValueError: boom at step 3" in str(info.value)
    assert info.value.result.exit_code == 1
    assert est.latest_training_job is not None
    assert est.latest_training_job.describe()["TrainingJobStatus"] == "Failed"


@pytest.mark.slow
def test_fit_without_wait_returns_while_the_job_runs_and_wait_replays_its_logs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    gate = tmp_path / "gate"
    est = Estimator(
        entry_point="gate.py",
        source_dir=str(EXAMPLES),
        environment={"GATE_FILE": str(gate)},
        max_run=180,  # bounds job.wait(), which has no timeout (nor has SageMaker's)
    )
    est.fit(wait=False)
    job = est.latest_training_job
    assert job is not None
    # The job cannot end before the gate opens: fit returned while it ran.
    assert job.describe()["TrainingJobStatus"] == "InProgress"
    assert job.result is None
    gate.touch()
    result = job.wait()
    assert result.ok and job.describe()["TrainingJobStatus"] == "Completed"
    out = capsys.readouterr().out
    assert "[algo-1,0]<stdout>: waiting at the gate\n[algo-1,0]<stdout>: through the gate" in out
    assert_nothing_left(Path(job.job_dir))


@pytest.mark.slow
def test_fit_with_logs_none_shows_no_rank_output(capsys: pytest.CaptureFixture[str]) -> None:
    est = Estimator(entry_point="contract.py", source_dir=str(SCRIPTS))
    est.fit(logs="None")
    assert "all_reduce ok" not in capsys.readouterr().out
    assert est.latest_training_job is not None
    log = Path(est.latest_training_job.job_dir) / "logs/rank-0.stdout"
    assert "all_reduce ok" in log.read_text()  # written, not shown


def test_unknown_arguments_are_errors_and_aws_only_ones_warnings() -> None:
    with pytest.raises(
        TypeError, match=r"unexpected argument 'instance_cont'\. Did you mean 'instance_count'\?"
    ):
        Estimator(entry_point="contract.py", source_dir=str(SCRIPTS), instance_cont=2)
    with pytest.warns(UserWarning, match="ignored by tenter .*: framework_version, role"):
        Estimator(
            entry_point="contract.py",
            source_dir=str(SCRIPTS),
            role="arn:x",
            framework_version="2.3",
        )


def test_deploy_says_tenter_only_trains() -> None:
    est = Estimator(entry_point="contract.py", source_dir=str(SCRIPTS))
    with pytest.raises(NotImplementedError, match="tenter only trains"):
        est.deploy(instance_type="ml.m4.xlarge", initial_instance_count=1)


def test_model_data_before_fit_is_an_error() -> None:
    est = Estimator(entry_point="contract.py", source_dir=str(SCRIPTS))
    with pytest.raises(RuntimeError, match=r"call fit\(\) first"):
        _ = est.model_data
