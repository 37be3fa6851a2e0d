"""``tenter run`` as a drop-in for torchrun: the same command line under real torchrun
(``python -m torch.distributed.run``) and under ``tenter run`` gives the workers the same
ranks, working directory, arguments and environment (placement aside), the same restarts and
the same console; and tenter ends cleanly where torchrun's script aborts at exit."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tenter.contract.torchrun import finished_marker
from tenter.contract.worker import is_placement
from tests.conftest import SCRIPTS, assert_nothing_left, job_dirs

PER_RUN = {"TORCHELASTIC_RUN_ID"}
"""Unique per run by design: torchrun's rendezvous id, tenter's job id."""


@dataclass
class Launch:
    output: str
    """stdout, stderr and the exit status."""
    ranks: dict[int, dict[str, Any]]
    """Rank -> what the worker recorded (its last attempt's)."""


def _launch(
    launcher: list[str], argvs: list[list[str]], cwd: Path, out: str, env: dict[str, str]
) -> Launch:
    """``launcher ARGV`` for each of ``argvs`` at once (torchrun: one per node), in ``cwd``,
    with ``out`` for ``{out}``."""
    procs = [
        subprocess.Popen(
            [*launcher, *(a.replace("{out}", out) for a in argv)],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for argv in argvs
    ]
    output = ""
    for proc in procs:
        text, _ = proc.communicate(timeout=180)
        output += f"{text}\nexit status {proc.returncode}"
    ranks = {
        int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in (cwd / out).glob("*.json")
    }
    return Launch(output, ranks)


def _torchrun_and_tenter(
    tmp_path: Path,
    flags: list[str],
    *script_args: str,
    nodes: int = 1,
    torchrun_env: dict[str, str] | None = None,
) -> tuple[Launch, Launch, dict[str, str]]:
    """``FLAGS scripts/dump_env.py OUT --lr 0.1 SCRIPT_ARGS`` under torchrun (``nodes``
    commands, one per node, ``--node-rank`` added), then under tenter, from ``tmp_path``; and
    the environment torchrun was started with."""
    argv = [*flags, "scripts/dump_env.py", "{out}", "--lr", "0.1", *script_args]
    per_node = [["--node-rank", str(n), *argv] for n in range(nodes)] if nodes > 1 else [argv]
    (tmp_path / "scripts").mkdir()
    shutil.copy(SCRIPTS / "dump_env.py", tmp_path / "scripts")
    # torchrun leaves its log directory in its TMPDIR: one of its own, not the test's.
    (tmp_path / "torchrun-tmp").mkdir()
    caller = {**os.environ, "TMPDIR": str(tmp_path / "torchrun-tmp"), **(torchrun_env or {})}
    torchrun = [sys.executable, "-m", "torch.distributed.run"]
    theirs = _launch(torchrun, per_node, tmp_path, "a", caller)
    tenter = [sys.executable, "-m", "tenter", "run"]
    ours = _launch(tenter, per_node[:1], tmp_path, "b", dict(os.environ))
    assert ours.output.endswith("exit status 0"), ours.output
    assert sorted(theirs.ranks) == sorted(ours.ranks) == [0, 1], theirs.output
    return theirs, ours, caller


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


def _job_dir(tenter_home: Path) -> Path:
    (job_dir,) = job_dirs(tenter_home / "jobs")
    return job_dir


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


COMMAND_LINES = {
    "standalone": (1, ["--standalone", "--nproc-per-node", "2"]),
    "c10d-endpoint": (1, ["--nnodes", "1", "--nproc_per_node", "2", "--rdzv-backend", "c10d",
                          "--rdzv-endpoint", "localhost:0", "--max-restarts", "0",
                          "--start-method", "spawn"]),
    # torchrun's classic multi-node line (static rendezvous), one command per node; tenter
    # runs the first node's command and simulates both hosts.
    "two-nodes-static": (2, ["--nnodes", "2", "--nproc-per-node", "1", "--master-addr",
                             "127.0.0.1", "--master-port", "{port}"]),
}  # fmt: skip


@pytest.mark.parametrize("name", COMMAND_LINES)
def test_run_gives_workers_what_torchrun_gives_them_if_given_its_command_line(
    name: str, tmp_path: Path, tenter_home: Path
) -> None:
    nodes, flags = COMMAND_LINES[name]
    flags = [f.replace("{port}", str(_free_port())) for f in flags]
    # torchrun's own exit status is not asserted: on torch 2.13 the script, which never
    # destroys its process group, aborts at exit in about half of torchrun's runs.
    theirs, ours, caller = _torchrun_and_tenter(tmp_path, flags, nodes=nodes)
    for rank, seen in theirs.ranks.items():
        mine = ours.ranks[rank]
        # The caller's directory, not the script's: the relative OUT_DIR landed there.
        assert mine["cwd"] == seen["cwd"] == str(tmp_path)
        assert (seen["argv"], mine["argv"]) == (["a", "--lr", "0.1"], ["b", "--lr", "0.1"])
        assert _differences(seen["env"], mine["env"], caller) == {}
        assert mine["env"]["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
        # The script returned (the bootstrap's marker), and tore its group down cleanly.
        assert Path(finished_marker(mine["env"]["TORCHELASTIC_ERROR_FILE"])).is_file()
    job_dir = _job_dir(tenter_home)
    assert json.loads((job_dir / "summary.json").read_text())["exit_code"] == 0
    if "--rdzv-endpoint" in flags:
        assert "note: --rdzv-endpoint localhost:0 is ignored" in ours.output
    if nodes > 1:
        assert "note: --node-rank 0 is ignored" in ours.output
    assert_nothing_left(job_dir)


def test_run_restarts_as_torchrun_does_if_given_max_restarts(
    tmp_path: Path, tenter_home: Path
) -> None:
    flags = ["--standalone", "--nproc-per-node", "2", "--max-restarts", "1"]
    # Plain torchrun hangs now and then in the restarted group's init_process_group: its
    # agent's store is shared across rounds without a per-round prefix, so the new group can
    # read the old one's gloo addresses. tenter sets this for restartable jobs; so does the
    # test for torchrun.
    fixed = {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1"}
    theirs, ours, _ = _torchrun_and_tenter(tmp_path, flags, "--fail-once", torchrun_env=fixed)
    assert theirs.output.count("hello from rank 1, attempt 1") == 1, theirs.output
    for launch in (theirs, ours):
        for seen in launch.ranks.values():
            assert seen["env"]["TORCHELASTIC_RESTART_COUNT"] == "1"
            assert seen["env"]["TORCHELASTIC_MAX_RESTARTS"] == "1"
    assert "hello from rank 1, attempt 1" in ours.output
    assert_nothing_left(_job_dir(tenter_home))


def test_run_shows_on_the_console_what_torchrun_shows_if_given_redirects(
    tmp_path: Path, tenter_home: Path
) -> None:
    # Both streams of every rank to files, rank 0's also to the console.
    flags = ["--standalone", "--nproc-per-node", "2", "-r", "3", "-t", "0:3"]
    theirs, ours, _ = _torchrun_and_tenter(tmp_path, flags)
    for launch in (theirs, ours):
        assert "hello from rank 0, attempt 0" in launch.output
        assert "hello from rank 1" not in launch.output
    job_dir = _job_dir(tenter_home)
    assert (job_dir / "logs/rank-1.stdout").read_text() == "hello from rank 1, attempt 0\n"
    assert_nothing_left(job_dir)


LEAVES_ITS_GROUP = """
import atexit, sys
import torch.distributed as dist
dist.init_process_group("gloo", init_method="file://{store}", rank=0, world_size=1)
atexit.register(lambda: print("group at exit:", dist.is_initialized()))
sys.exit({status})
"""


@pytest.mark.parametrize("status", [0, 3])
def test_bootstrap_tears_down_a_left_group_and_marks_the_rank_if_the_script_returned(
    status: int, tmp_path: Path
) -> None:
    script = tmp_path / "script.py"
    script.write_text(LEAVES_ITS_GROUP.format(store=tmp_path / "store", status=status))
    error_file = tmp_path / "rank-0.error.json"
    done = subprocess.run(
        [sys.executable, "-m", "tenter.runtime.bootstrap", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TORCHELASTIC_ERROR_FILE": str(error_file)},
    )
    assert done.returncode == status, done.stderr
    finished = Path(finished_marker(str(error_file)))
    assert finished == tmp_path / "rank-0.finished"
    if status == 0:
        assert "group at exit: False" in done.stdout
        assert finished.is_file() and not error_file.exists()
    else:  # a failed script keeps its group for torch's own teardown, and is no finished rank
        assert "group at exit: True" in done.stdout
        assert error_file.is_file() and not finished.exists()
