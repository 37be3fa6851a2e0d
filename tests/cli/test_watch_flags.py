"""``tenter run``'s watching flags (``--live``, ``--metrics-port``) are checked before anything
starts: a bad or busy port, or a backend that cannot show them, is bad input (exit 2) that
creates no job directory and starts no process."""

from __future__ import annotations

import socket
from pathlib import Path

import yaml

from tests.conftest import SCRIPTS, tenter

SCRIPT = str(SCRIPTS / "contract.py")


def _no_job(tenter_home: Path) -> None:
    jobs = tenter_home / "jobs"
    assert not jobs.exists() or list(jobs.iterdir()) == []


def test_a_metrics_port_out_of_range_is_refused(tenter_home: Path) -> None:
    done = tenter("run", "--skip-preflight", "--metrics-port", "99999", SCRIPT)
    assert done.returncode == 2
    assert "--metrics-port: 99999 is not a TCP port" in done.stderr
    assert "Traceback" not in done.stderr
    _no_job(tenter_home)


def test_a_metrics_port_in_use_is_refused_before_the_job_starts(tenter_home: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        done = tenter("run", "--skip-preflight", "--metrics-port", str(port), SCRIPT)
    assert done.returncode == 2
    assert f"--metrics-port: cannot serve metrics on 127.0.0.1:{port}" in done.stderr
    assert "Traceback" not in done.stderr
    _no_job(tenter_home)


def test_live_and_metrics_are_refused_on_kubernetes(tenter_home: Path, tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "entry_point": "contract.py",
                "source_dir": str(SCRIPTS),
                "instance_type": "ml.p4d.24xlarge",
                "backend": "kubernetes",
                "kubernetes": {"image": "train:1.0"},
            }
        )
    )
    for flag in (["--live"], ["--metrics-port", "0"]):
        done = tenter("run", str(spec), *flag)
        assert done.returncode == 2, done.stderr
        assert f"{flag[0]}: the kubernetes backend's ranks report their progress" in done.stderr
        _no_job(tenter_home)


def test_detach_refuses_the_live_view(tenter_home: Path) -> None:
    done = tenter("run", "--skip-preflight", "--detach", "--live", SCRIPT)
    assert done.returncode == 2
    assert "--detach: a detached job has no console" in done.stderr
    _no_job(tenter_home)


def test_a_key_given_twice_and_a_path_of_no_user_are_refused(tenter_home: Path) -> None:
    twice = tenter("plan", "--env", "A=1", "--env", "A=2", SCRIPT)
    assert twice.returncode == 2
    assert "--env: A is given twice (A=1, A=2). Fix: give it once" in twice.stderr
    nouser = tenter("plan", "--output-dir", "~no-such-user-here/out", SCRIPT)
    assert nouser.returncode == 2
    assert "--output-dir: '~no-such-user-here/out'" in nouser.stderr
    assert "Traceback" not in twice.stderr + nouser.stderr
