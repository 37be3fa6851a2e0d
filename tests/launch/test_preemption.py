"""Graceful preemption on the local backend: SIGTERM to ``tenter run`` (or ``tenter cancel
--preempt``) stops every rank at the same step boundary after a final checkpoint, the job ends
as preempted (exit 75), and a new run resumes it exactly; a job that does not stop within the
grace period is stopped as on a cancel."""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from tenter.errors import ExitCode
from tenter.launch.shared.processes import STOP_GRACE_S
from tenter.launch.shared.signals import StopRequest, is_preemption
from tests.conftest import (
    REPO,
    Background,
    assert_nothing_left,
    job_checkpoints,
    job_dirs,
    tenter,
)
from tests.launch.slurm_cluster import queue, slurm_cluster
from tests.launch.specs import write_spec

pytestmark = pytest.mark.slow

TRAIN = str(REPO / "examples" / "elastic" / "train.py")


def training_spec(tmp_path: Path, output: str, ckpt: Path | None, **fields: object) -> Path:
    """examples/elastic/train.py for one epoch (16 steps) on 2 hosts, checkpoints every 4
    steps in ``ckpt`` (None: the job's own), under pause_at_step.py (which waits, at
    PAUSE_AT_STEP, for the preemption request: it then lands at that step boundary)."""
    job = {
        "args": [TRAIN, "--epochs", "1"],
        "instance_count": 2,
        "processes_per_host": 1,
        "checkpoint": {"every": 4, **({"dir": str(ckpt)} if ckpt else {})},
        "output_dir": str(tmp_path / output),
        **fields,
    }
    return write_spec(tmp_path, "pause_at_step.py", **job)


def started(tmp_path: Path, home: Path, script: str, **fields: object) -> Background:
    """``tenter run`` of ``script`` on 2 ranks, once every rank printed "ready"."""
    spec = write_spec(tmp_path, script, instance_count=2, processes_per_host=1, **fields)
    job = Background("run", str(spec), home=home)
    job.wait_for("ready", count=2)
    return job


def latest_checkpoint(ckpt: Path) -> int:
    manifest = json.loads((ckpt / "manifest.json").read_text())
    return int(manifest["checkpoints"][-1]["step"])


def final_model(job_dir: Path) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = torch.load(job_dir / "hosts/algo-1/model/model.pt")
    return state


def test_sigterm_asks_for_a_preemption_and_a_stop_signal_after_it_stops_now() -> None:
    stop = StopRequest()
    stop.on_signal(signal.SIGTERM)
    assert stop.is_set() and is_preemption(stop)
    stop.on_signal(signal.SIGTERM)  # repeated: still the same preemption
    assert is_preemption(stop)
    stop.on_signal(signal.SIGINT)
    assert not is_preemption(stop)
    stop.on_signal(signal.SIGTERM)  # once stopping now, never back to a preemption
    assert not is_preemption(stop)
    hangup = StopRequest()
    hangup.on_signal(signal.SIGHUP)
    assert hangup.is_set() and not is_preemption(hangup)


def test_sigterm_preempts_at_a_step_boundary_and_a_new_run_resumes_to_the_same_model(
    tmp_path: Path, tenter_home: Path
) -> None:
    # The ranks see the request at step 6 and agree on it at step 7 (the agreement's
    # all-reduce runs during a step), off the checkpoint interval (4): the preemption's own.
    ckpt = tmp_path / "ckpt"
    spec = training_spec(tmp_path, "preempted", ckpt, environment={"PAUSE_AT_STEP": "6"})
    job = Background("run", str(spec), home=tenter_home)
    job.wait_for("paused at step 6", count=2)
    job.proc.send_signal(signal.SIGTERM)
    out = job.finish()
    assert job.proc.returncode == ExitCode.PREEMPTED, out
    assert "preempting: SIGTERM to every rank" in out
    assert re.search(r"^preempted: final checkpoint at step 7 in \d+\.\d s$", out, re.M), out
    assert "[algo-1,0]<stdout>: preempted at step 7: stopping" in out
    (preempted_dir,) = job_dirs(tmp_path / "preempted")
    summary = json.loads((preempted_dir / "summary.json").read_text())
    assert summary["state"] == "preempted" and summary["failures"] == []
    assert "was preempted after" in summary["summary"]
    assert latest_checkpoint(ckpt) == 7
    assert not (preempted_dir / "hosts/algo-1/model/model.pt").exists()
    status = tenter("status", str(preempted_dir))
    assert f"job {preempted_dir.name}: PREEMPTED (exit 75)" in status.stdout
    assert_nothing_left(preempted_dir)

    resumed = tenter("run", str(training_spec(tmp_path, "resumed", ckpt)))
    assert resumed.returncode == 0, resumed.stderr
    assert "<stdout>: resumed at step 7 " in resumed.stdout
    reference = tenter("run", str(training_spec(tmp_path, "reference", None)))
    assert reference.returncode == 0, reference.stderr
    assert "resumed" not in reference.stdout
    # Exact: the same batches, dropout masks, momentum and learning rate as without the stop.
    (resumed_dir,), (reference_dir,) = (
        job_dirs(tmp_path / name) for name in ("resumed", "reference")
    )
    expected, got = final_model(reference_dir), final_model(resumed_dir)
    assert got.keys() == expected.keys()
    for key, value in expected.items():
        assert torch.equal(got[key], value), key


@pytest.mark.usefixtures("short_stop_grace")
def test_a_job_that_does_not_stop_within_the_grace_period_is_stopped(
    tmp_path: Path, tenter_home: Path
) -> None:
    # ignores_sigterm.py neither ends at SIGTERM nor checks for a preemption: the grace
    # period runs out, and with no final checkpoint the job ends as interrupted.
    job = started(tmp_path, tenter_home, "ignores_sigterm.py", checkpoint={"preemption_grace": 1})
    job.proc.send_signal(signal.SIGTERM)
    out = job.finish(timeout=60)
    assert job.proc.returncode == ExitCode.INTERRUPTED, out
    assert (
        "preempted without a final checkpoint: the ranks did not end within the grace period "
        "of 1 s and were stopped" in out
    )
    assert json.loads((job.job_dir / "summary.json").read_text())["state"] == "interrupted"
    assert_nothing_left(job.job_dir)


def test_a_loop_that_ignores_preempted_stops_at_its_next_maybe_save(
    tmp_path: Path, tenter_home: Path
) -> None:
    # ignores_preemption.py calls maybe_save at every step and never reads ckpt.preempted:
    # the call after the final checkpoint ends each rank, well inside the grace period
    # (before the fix the ranks saved at every step until the grace period ran out).
    grace = 120
    job = started(
        tmp_path, tenter_home, "ignores_preemption.py", checkpoint={"preemption_grace": grace}
    )
    signalled = time.monotonic()
    job.proc.send_signal(signal.SIGTERM)
    out = job.finish(timeout=grace)
    assert job.proc.returncode == ExitCode.PREEMPTED, out
    assert time.monotonic() - signalled < grace / 2, out
    final = re.search(r"^preempted: final checkpoint at step (\d+) in \d+\.\d s$", out, re.M)
    assert final, out
    manifest = json.loads((job_checkpoints(job.job_dir) / "manifest.json").read_text())
    assert [c["step"] for c in manifest["checkpoints"]] == [int(final[1])]  # one, the final
    assert "after the loop" not in out
    summary = json.loads((job.job_dir / "summary.json").read_text())
    assert summary["state"] == "preempted" and summary["failures"] == []
    assert_nothing_left(job.job_dir)


@pytest.mark.usefixtures("short_stop_grace")
def test_ctrl_c_during_a_preemption_stops_the_job_at_once(
    tmp_path: Path, tenter_home: Path
) -> None:
    job = started(tmp_path, tenter_home, "ignores_sigterm.py")
    job.proc.send_signal(signal.SIGTERM)
    job.wait_for("preempting:")
    job.proc.send_signal(signal.SIGINT)
    out = job.finish(timeout=60)
    assert job.proc.returncode == ExitCode.INTERRUPTED, out
    assert "was interrupted" in out
    assert_nothing_left(job.job_dir)


def test_cancel_preempt_stops_a_script_that_checks_tenter_preempted(
    tmp_path: Path, tenter_home: Path
) -> None:
    job = started(tmp_path, tenter_home, "preemptible.py")
    cancelled = tenter("cancel", "--preempt", job.job_dir.name)
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"preempted job {job.job_dir.name}: stopped its launcher" in cancelled.stdout
    out = job.finish(timeout=60)
    assert job.proc.returncode == ExitCode.PREEMPTED, out
    # Both ranks stopped after the same step: they agreed.
    steps = re.findall(r"rank \d stopped for the preemption after step (\d+)", out)
    assert len(steps) == 2 and steps[0] == steps[1], out
    assert re.search(r"^preempted: the ranks stopped at a step boundary in \d+\.\d s$", out, re.M)
    assert_nothing_left(job.job_dir)


@pytest.fixture(scope="module")
def slurm() -> Iterator[dict[str, str]]:
    with slurm_cluster() as env, pytest.MonkeyPatch.context() as patch:
        patch.setenv("SLURM_CONF", env["SLURM_CONF"])  # for tenter and Slurm's commands
        yield env


def test_scancel_preempts_a_slurm_job_after_a_final_checkpoint(
    tmp_path: Path, tenter_home: Path, slurm: dict[str, str]
) -> None:
    ckpt = tmp_path / "ckpt"
    spec = training_spec(
        tmp_path,
        "slurm",
        ckpt,
        backend="slurm",
        instance_count=1,
        processes_per_host=2,
        environment={"PAUSE_AT_STEP": "6"},
    )
    job = Background("run", str(spec), home=tenter_home)
    job.wait_for("paused at step 6", count=2)
    (job_dir,) = job_dirs(tmp_path / "slurm")
    # scancel: Slurm's SIGTERM reaches the node's agent and the ranks; neither stops at once.
    cancelled = tenter("cancel", str(job_dir))
    assert cancelled.returncode == 0, cancelled.stderr
    out = job.finish()
    assert job.proc.returncode == ExitCode.PREEMPTED, out
    assert re.search(r"^preempted: final checkpoint at step 7 in \d+\.\d s$", out, re.M), out
    assert "Slurm job state: CANCELLED" in out
    assert latest_checkpoint(ckpt) == 7
    assert queue(slurm) == []
    assert_nothing_left(job_dir)


def test_a_stop_ends_ranks_that_wait_in_torch_at_once(tmp_path: Path, tenter_home: Path) -> None:
    # Each rank waits in torch's C++ with the preemption's SIGTERM handler armed: Python would
    # run the handler only after the wait, so the stop lasted the grace period, then SIGKILL.
    job = started(tmp_path, tenter_home, "waits_in_torch.py")
    cancelled_at = time.monotonic()
    assert tenter("cancel", job.job_dir.name).returncode == 0
    out = job.finish(timeout=60)
    assert time.monotonic() - cancelled_at < STOP_GRACE_S / 2, out
    assert job.proc.returncode == ExitCode.INTERRUPTED, out
    assert_nothing_left(job.job_dir)
