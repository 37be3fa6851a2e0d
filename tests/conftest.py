"""Shared fixtures: every test gets its own TENTER_HOME and TMPDIR, and end-to-end tests
check that a job leaves no process, port or temp file behind."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = Path(__file__).parent / "launch" / "scripts"


@pytest.fixture(autouse=True)
def tenter_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "tenter-home"
    monkeypatch.setenv("TENTER_HOME", str(home))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    return home


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str

    @property
    def job_dir(self) -> Path:
        jobs = sorted((Path(os.environ["TENTER_HOME"]) / "jobs").iterdir())
        assert len(jobs) == 1, jobs
        return jobs[0]

    @property
    def summary(self) -> dict[str, object]:
        data: dict[str, object] = json.loads((self.job_dir / "summary.json").read_text())
        return data


def tenter(*args: str, timeout: float = 180) -> Finished:
    """Run the `tenter` CLI in a subprocess, as a user would."""
    proc = subprocess.run(
        [sys.executable, "-m", "tenter", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    return Finished(proc.returncode, proc.stdout, proc.stderr)


def job_processes(job_id: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.environ().get("TENTER_JOB_ID") == job_id:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def port_is_free(addr: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((addr, port))
        except OSError:
            return False
    return True


def assert_nothing_left(job_dir: Path) -> None:
    """No process of the job, no port it bound, no temp file it made."""
    job_id = job_dir.name
    assert job_processes(job_id) == []
    assert psutil.Process().children(recursive=True) == []
    summary = json.loads((job_dir / "summary.json").read_text())
    host, port = summary["rdzv_endpoint"].rsplit(":", 1)
    assert port_is_free(host, int(port))
    for log in (job_dir / "logs").glob("rank-*.stdout"):
        for line in log.read_text().splitlines():
            if line.startswith("MASTER="):
                addr, master_port = line.removeprefix("MASTER=").rsplit(":", 1)
                assert port_is_free(addr, int(master_port))
    assert list(Path(os.environ["TMPDIR"]).iterdir()) == []
