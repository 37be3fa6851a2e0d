"""``tenter run`` as a drop-in for torchrun: the same command line under real torchrun
(``python -m torch.distributed.run``) and under ``tenter run`` gives the workers the same
ranks, working directory, arguments and environment, placement aside."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tenter.contract.torchrun import finished_marker
from tenter.contract.worker import is_placement
from tests.conftest import SCRIPTS, assert_nothing_left

PER_RUN = {"TORCHELASTIC_RUN_ID"}
"""Unique per run by design: torchrun's rendezvous id, tenter's job id."""

COMMAND_LINES = [
    ["--standalone", "--nproc-per-node", "2"],
    ["--nnodes", "1", "--nproc_per_node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
     "localhost:0", "--max-restarts", "0", "--start-method", "spawn"],
]  # fmt: skip


def _launch(launcher: list[str], flags: list[str], cwd: Path, out: str, env: dict[str, str]) -> str:
    """Run ``launcher FLAGS scripts/dump_env.py OUT --lr 0.1`` in ``cwd``; its output."""
    proc = subprocess.run(
        [*launcher, *flags, "scripts/dump_env.py", out, "--lr", "0.1"],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    return proc.stdout + proc.stderr + f"\nexit status {proc.returncode}"


def _records(folder: Path) -> dict[int, dict[str, Any]]:
    return {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in folder.glob("*.json")}


def _differences(
    torchrun: dict[str, str], tenter: dict[str, str], caller: dict[str, str]
) -> dict[str, Any]:
    """Variables torchrun gives a worker (beyond its ``caller``'s) that tenter gives otherwise."""
    added = {k: v for k, v in torchrun.items() if caller.get(k) != v}
    return {
        k: (v, tenter.get(k))
        for k, v in added.items()
        if tenter.get(k) != v and not is_placement(k) and k not in PER_RUN
    }


@pytest.mark.parametrize("flags", COMMAND_LINES, ids=["standalone", "c10d-endpoint"])
def test_run_gives_workers_what_torchrun_gives_them_if_given_its_command_line(
    flags: list[str], tmp_path: Path, tenter_home: Path
) -> None:
    (tmp_path / "scripts").mkdir()
    shutil.copy(SCRIPTS / "dump_env.py", tmp_path / "scripts")
    # torchrun's own exit status is not asserted: on torch 2.13 the script, which never
    # destroys its process group, aborts at exit in about half of torchrun's runs.
    # torchrun leaves its log directory in its TMPDIR: one of its own.
    (tmp_path / "torchrun-tmp").mkdir()
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    torchrun_env = {**os.environ, "TMPDIR": str(tmp_path / "torchrun-tmp")}
    torchrun_output = _launch(torchrun, flags, tmp_path, "a", torchrun_env)
    tenter = [sys.executable, "-m", "tenter", "run"]
    tenter_output = _launch(tenter, flags, tmp_path, "b", dict(os.environ))
    assert tenter_output.endswith("exit status 0"), tenter_output
    theirs, ours = _records(tmp_path / "a"), _records(tmp_path / "b")
    assert sorted(theirs) == [0, 1], torchrun_output
    assert sorted(ours) == [0, 1]
    for rank in theirs:
        # The caller's directory, not the script's: the relative OUT_DIR landed there.
        assert ours[rank]["cwd"] == theirs[rank]["cwd"] == str(tmp_path)
        assert theirs[rank]["argv"] == ["a", "--lr", "0.1"]
        assert ours[rank]["argv"] == ["b", "--lr", "0.1"]
        assert _differences(theirs[rank]["env"], ours[rank]["env"], torchrun_env) == {}
        assert (
            ours[rank]["env"]["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
        )
    (job_dir,) = (tenter_home / "jobs").iterdir()
    # Every rank returned from the script (the bootstrap's marker) and the job succeeded.
    for rank in (0, 1):
        error_file = ours[rank]["env"]["TORCHELASTIC_ERROR_FILE"]
        assert Path(finished_marker(error_file)).is_file()
    assert json.loads((job_dir / "summary.json").read_text())["exit_code"] == 0
    if "--rdzv-endpoint" in flags:
        assert "note: --rdzv-endpoint localhost:0 is ignored" in tenter_output
    assert_nothing_left(job_dir)
