"""The slurm backend: golden sbatch scripts, and jobs on a real single-node Slurm cluster
(slurmctld + slurmd + munged started by tests/launch/slurm_cluster.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tenter.errors import ExitCode
from tenter.launch import api
from tenter.launch.backends.slurm.node import SlurmNode, in_rendezvous_order, resolve_plan
from tenter.launch.backends.slurm.script import SCRIPT
from tenter.spec import load
from tests.conftest import (
    REPO,
    SCRIPTS,
    Background,
    assert_golden,
    assert_nothing_left,
    tenter,
)
from tests.launch.slurm_cluster import (
    ACCOUNT,
    SECOND_PARTITION,
    cancel_when_ready,
    queue,
    slurm_cluster,
    start_controller,
    stop_controller,
)
from tests.security.kept import RANK, SECRET, assert_kept_yet_every_rank_has_it, every_cmdline

DIGITS = REPO / "examples" / "digits"
GOLDEN = Path(__file__).parent / "golden"


@pytest.mark.parametrize(
    ("instance_type", "golden"),
    [("ml.p4d.24xlarge", "sbatch-p4d-2hosts.txt"), ("ml.p3.8xlarge", "sbatch-p3-2hosts.txt")],
)
def test_dryrun_renders_the_whole_sbatch_script(
    instance_type: str, golden: str, tenter_home: Path
) -> None:
    spec, _ = load(
        {
            "name": "golden",
            "entry_point": "train.py",
            "source_dir": str(DIGITS),
            "instance_count": 2,
            "instance_type": instance_type,
            "max_run": 3600,
            "backend": "slurm",
        },
        REPO,
    )
    plan = api.dryrun(spec, "golden-job")
    assert plan.launcher == [
        "sbatch",
        "--parsable",
        str(tenter_home / "jobs/golden-job/job.sbatch"),
    ]
    script = plan.files["job.sbatch"]
    normalised = script.replace(str(tenter_home), "$TENTER_HOME").replace(sys.executable, "$PYTHON")
    assert_golden(GOLDEN / golden, normalised.replace(str(REPO), "$REPO"))
    gpus = "--gpus-per-node=8" if instance_type == "ml.p4d.24xlarge" else "--gpus-per-node=4"
    assert script.count(f"#SBATCH {gpus}\n") == 1
    # Host names are Slurm's to give: the plan has placeholders the nodes resolve.
    assert plan.host_env(plan.hosts[1])["TENTER_HOST_ADDR"] == "${slurm_node_1}"


def test_dryrun_puts_the_slurm_block_in_the_script(tenter_home: Path) -> None:
    spec, _ = load(
        {
            "name": "golden",
            "entry_point": "train.py",
            "source_dir": str(DIGITS),
            "instance_count": 2,
            "instance_type": "ml.p4d.24xlarge",
            "backend": "slurm",
            "slurm": {
                "partition": "gpu",
                "account": "ml-team",
                "qos": "high",
                "reservation": "maint",
                "constraint": "h100&[rack1|rack2]",
                "exclusive": True,
                "container_image": "nvcr.io#nvidia/pytorch:24.05-py3",
                "container_mounts": [{"source": "/fsx", "target": "/data", "read_only": True}],
                "extra_directives": ["--mail-type=END", "--comment=nightly"],
            },
        },
        REPO,
    )
    plan = api.dryrun(spec, "golden-job")
    script = plan.files["job.sbatch"]
    normalised = script.replace(str(tenter_home), "$TENTER_HOME").replace(str(REPO), "$REPO")
    assert_golden(GOLDEN / "sbatch-p4d-slurm-options.txt", normalised)
    # In the container the agents and ranks run the image's Python, not this machine's.
    assert sys.executable not in script and plan.command[0] == "python3"


def test_hosts_go_to_nodes_in_rendezvous_order_at_their_addresses(tenter_home: Path) -> None:
    # torch's rendezvous sorts hosts by address string: node10 (10.0.0.10) before node9.
    scontrol = (
        "NodeName=node9 Arch=x86_64 NodeAddr=10.0.0.9 NodeHostName=node9 State=IDLE\n"
        "NodeName=node10 Arch=x86_64 NodeAddr=10.0.0.10 NodeHostName=node10 State=IDLE\n"
        "NodeName=node11 Arch=x86_64 NodeHostName=node11 State=IDLE\n"  # no NodeAddr
    )
    assert in_rendezvous_order(scontrol) == [
        SlurmNode("node10", "10.0.0.10"),
        SlurmNode("node9", "10.0.0.9"),
        SlurmNode("node11", "node11"),
    ]
    fields = {"entry_point": "contract.py", "source_dir": str(SCRIPTS), "instance_count": 2}
    spec, _ = load({**fields, "backend": "slurm"}, REPO)
    text = api.dryrun(spec, "order-job").to_json()
    nodes = [SlurmNode("b", "127.0.0.1"), SlurmNode("a", "127.0.0.2")]
    plan = resolve_plan(text, nodes, node_id=0)  # as the first node resolves it
    assert [h.addr for h in plan.hosts] == ["127.0.0.1", "127.0.0.2"]
    assert plan.host_env(plan.hosts[1])["TENTER_HOST_ADDR"] == "127.0.0.2"
    assert plan.host_env(plan.hosts[0])["SM_NETWORK_INTERFACE_NAME"] == "lo"  # its NIC
    assert plan.process_env(plan.hosts[1], plan.hosts[1].ranks[0])["MASTER_ADDR"] == "127.0.0.1"
    assert plan.rdzv_endpoint.startswith("127.0.0.1:")


@pytest.mark.parametrize(
    ("command", "where"),
    [
        (
            ["run", "--backend", "slurm", "--skip-preflight", str(SCRIPTS / "contract.py")],
            "backend",
        ),
        (
            [
                "rehearse",
                "--backend",
                "slurm",
                str(REPO / "examples/digits/job.yaml"),
                "--hosts",
                "2",
            ],
            "--backend",
        ),
    ],
    ids=["run", "rehearse"],
)
def test_missing_sbatch_is_an_error_that_names_the_fix(
    tenter_home: Path, command: list[str], where: str
) -> None:
    done = _tenter_with_path("/nonexistent", *command)
    assert done.returncode == 5
    assert f"error: {where}: slurm: sbatch is not on PATH" in done.stderr
    assert "slurm-client" in done.stderr
    assert not (tenter_home / "jobs").exists()


def _tenter_with_path(path: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tenter", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": path},
        cwd=REPO,
        timeout=120,
    )


# A real Slurm cluster from here on.


@pytest.fixture(scope="module")
def cluster() -> Iterator[dict[str, str]]:
    with slurm_cluster() as env, pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLURM_CONF", env["SLURM_CONF"])  # for tenter and Slurm's commands
        yield env


@pytest.mark.slow
def test_digits_trains_as_a_one_node_two_task_slurm_job(cluster: dict[str, str]) -> None:
    done = tenter(
        "run", "--backend", "slurm", str(DIGITS / "job.yaml"), "--hosts", "1", "--hp", "epochs=8"
    )
    assert done.returncode == 0, done.stderr
    metrics = json.loads((done.job_dir / "hosts/algo-1/model/metrics.json").read_text())
    assert metrics["test_accuracy"] >= 0.94
    assert "[algo-1,0]<stdout>: final test accuracy" in done.stdout
    assert "submitted as Slurm job" in done.stderr
    status = tenter("status", done.job_dir.name)
    assert status.returncode == 0 and f"job {done.job_dir.name}: SUCCEEDED" in status.stdout
    # Rank 0 prints the accuracy; rank 1 prints nothing: rank 1's logs are empty, not rank 0's.
    logs = tenter("logs", done.job_dir.name, "--ranks", "0")
    assert logs.returncode == 0, logs.stderr
    assert "[algo-1,0]<stdout>: final test accuracy" in logs.stdout
    logs = tenter("logs", done.job_dir.name, "--ranks", "1")
    assert logs.returncode == 0, logs.stderr
    assert "[algo-1,0]" not in logs.stdout
    assert queue(cluster) == []
    assert_nothing_left(done.job_dir)


@pytest.mark.slow
def test_a_secret_reaches_every_rank_of_a_slurm_job_and_is_written_and_shown_nowhere(
    cluster: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = tmp_path / "release"
    monkeypatch.setenv("HF_TOKEN", SECRET)
    job = Background(
        "run", "--backend", "slurm", "--hosts", "1", "--procs-per-host", "2",
        "--secret", "HF_TOKEN", "--env", f"RELEASE_FILE={release}", str(RANK),
    )  # fmt: skip
    try:
        job.wait_for("<stdout>: ready", count=2)
        cmdlines = every_cmdline()  # sbatch's steps, the node's agent, the ranks among them
    finally:
        release.touch()
    console = job.finish()
    assert job.proc.returncode == 0, console
    assert sum(str(RANK) in c for c in cmdlines) >= 2, cmdlines
    assert (job.job_dir / SCRIPT).is_file()  # the batch script: among the files checked here
    assert_kept_yet_every_rank_has_it(job.job_dir, console, cmdlines, world=2)
    assert queue(cluster) == []
    assert_nothing_left(job.job_dir)


@pytest.mark.slow
def test_a_failing_slurm_job_reports_its_root_cause_and_exit_code(cluster: dict[str, str]) -> None:
    done = tenter(
        "run", "--backend", "slurm", "--hosts", "1", "--procs-per-host", "2",
        str(SCRIPTS / "fail_last.py"),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    summary = done.stderr[done.stderr.index("FAILED after") :]
    assert "Slurm job state: FAILED" in summary
    assert "root cause: rank 1 on host algo-1 (local rank 1" in summary
    assert "ValueError: boom at step 3" in summary
    assert f'File "{SCRIPTS / "fail_last.py"}"' in summary
    assert queue(cluster) == []
    assert_nothing_left(done.job_dir)


@pytest.mark.slow
def test_cancel_stops_a_running_slurm_job(cluster: dict[str, str]) -> None:
    logs = cancel_when_ready(tenter, lambda: queue(cluster), hosts=1, procs=2)
    assert "[algo-1,0]<stdout>: ready 0" in logs
    assert "[algo-1,1]<stdout>: ready 1" in logs


@pytest.mark.slow
def test_sbatch_rejection_is_shown_verbatim_with_a_hint(
    cluster: dict[str, str], tenter_home: Path
) -> None:
    # This cluster has no GPUs: Slurm refuses --gpus-per-node.
    done = tenter(
        "run", "--backend", "slurm", "--skip-preflight", "--instance-type", "ml.p4d.24xlarge",
        str(SCRIPTS / "contract.py"),
    )  # fmt: skip
    assert done.returncode == ExitCode.BACKEND_REFUSED
    assert "sbatch: error: Invalid generic resource (gres) specification" in done.stderr
    assert "Fix: `tenter plan --backend slurm`" in done.stderr
    assert not any((tenter_home / "jobs").iterdir())
    assert queue(cluster) == []


@pytest.mark.slow
def test_sbatch_honours_the_partition_and_account_and_refuses_a_wrong_account(
    cluster: dict[str, str], tenter_home: Path
) -> None:
    # The cluster's second partition takes only jobs of its account (slurm_cluster.py).
    refused = tenter(
        "run", "--backend", "slurm", "--partition", SECOND_PARTITION, "--account", "other",
        str(SCRIPTS / "contract.py"),
    )  # fmt: skip
    assert refused.returncode == ExitCode.BACKEND_REFUSED
    assert f"partition {SECOND_PARTITION} needs --account={ACCOUNT}" in refused.stderr
    assert not any((tenter_home / "jobs").iterdir())
    done = tenter(
        "run", "--backend", "slurm", "--partition", SECOND_PARTITION, "--account", ACCOUNT,
        "--hosts", "1", "--procs-per-host", "1", str(SCRIPTS / "contract.py"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    slurm_id = json.loads((done.job_dir / "handle.json").read_text())["scheduler_id"]
    shown = subprocess.run(
        ["scontrol", "show", "job", "-o", slurm_id], capture_output=True, text=True, check=True
    ).stdout
    assert f" Partition={SECOND_PARTITION} " in shown and f" Account={ACCOUNT} " in shown
    assert "JobState=COMPLETED" in shown
    assert queue(cluster) == []


@pytest.mark.slow
def test_a_slurmctld_restart_mid_job_is_waited_out(
    cluster: dict[str, str], tmp_path: Path, tenter_home: Path
) -> None:
    release = tmp_path / "release"
    job = Background(
        "run", "--backend", "slurm", "--hosts", "1", "--procs-per-host", "1",
        "--env", f"RELEASE_FILE={release}", str(SCRIPTS / "wait_for_file.py"),
    )  # fmt: skip
    try:
        job.wait_for("[algo-1,0]<stdout>: ready")
        stop_controller(cluster)
        job.wait_for("Slurm does not tell job")  # tenter saw the outage and goes on asking
        start_controller(cluster)
        job.wait_for("Slurm answers again")
        release.touch()
        out = job.finish()
    finally:
        if job.proc.poll() is None:
            job.kill()
    assert job.proc.returncode == 0, out
    assert "squeue failed: " in out
    assert "[algo-1,0]<stdout>: released" in out
    assert queue(cluster) == []
    assert_nothing_left(job.job_dir)
