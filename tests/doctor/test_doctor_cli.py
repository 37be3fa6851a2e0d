"""``tenter doctor`` on this machine, and preflight in front of a real ``tenter run``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from tenter.cli.main import main
from tenter.doctor import CHECKS, preflight
from tenter.doctor.result import Status
from tenter.spec import load
from tests.conftest import tenter


def doctor_json(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, object]]:
    code = main(["doctor", "--json", *args])
    return code, json.loads(capsys.readouterr().out)


def statuses(report: dict[str, object], host: int = 0) -> dict[str, str]:
    hosts = report["hosts"]
    assert isinstance(hosts, list)
    return {c["check"]: c["status"] for c in hosts[host]["checks"]}


def test_doctor_passes_on_this_cpu_machine(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = doctor_json(capsys)
    assert code == 0 and report["ok"] is True
    found = statuses(report)
    assert list(found) == [c.name for c in CHECKS]
    assert found["nccl"] == "skip" and found["libfabric"] == "pass"


def test_doctor_exits_1_if_this_machine_is_judged_as_a_p4d(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, report = doctor_json(capsys, "--instance-type", "ml.p4d.24xlarge")
    assert code == 1 and report["ok"] is False
    failed = {k for k, v in statuses(report).items() if v == "fail"}
    assert {"gpus", "efa-devices", "libfabric"} <= failed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--instance-type", "p9.huge"], "--instance-type: 'p9.huge' is not in the catalog"),
        (["--check", "gpu"], "--check: unknown check(s) gpu. Fix: choose from:"),
    ],
)
def test_doctor_exits_2_naming_the_flag_if_input_is_bad(
    capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["doctor", *args]) == 2
    assert message in capsys.readouterr().err


def test_doctor_shows_a_host_matrix_for_a_multi_host_job(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "train.py").write_text("print('hi')\n")
    spec = tmp_path / "job.yaml"
    spec.write_text("entry_point: train.py\ninstance_count: 3\n")
    assert main(["doctor", str(spec), "--check", "shm", "--check", "host-resolution"]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "algo-1" in line)
    assert "algo-2" in header and "algo-3" in header
    code, report = doctor_json(capsys, str(spec))
    assert code == 0
    hosts = report["hosts"]
    assert isinstance(hosts, list) and [h["host"] for h in hosts] == ["algo-1", "algo-2", "algo-3"]


def test_preflight_takes_a_p4d_rehearsal_here_as_the_estimator_does(tmp_path: Path) -> None:
    from tenter.launch import api

    (tmp_path / "train.py").write_text("")
    p4d, _ = load(
        {"entry_point": "train.py", "instance_type": "ml.p4d.24xlarge", "instance_count": 2},
        tmp_path,
    )
    report = preflight(p4d, api.dryrun(p4d))
    # Its hosts simulated here get the CPU, as local's do (SM_NUM_GPUS=0), and meet over TCP:
    # the fabric the real instances need is a warning (Estimator.fit runs the same job).
    assert not report.blocking
    assert [r.host for r in report.reports] == ["algo-1", "algo-2"]
    warned = {o.check for o in report.reports[0].outcomes if o.result.status is Status.WARN}
    assert warned >= {"efa-devices", "libfabric", "memlock"}
    efa = next(o for o in report.reports[0].outcomes if o.check == "efa-devices")
    assert "a rehearsal on this machine" in efa.result.found
    # A real mistake still blocks: FI_PROVIDER=efa where the type has no EFA (NCCL hangs).
    wrong, _ = load({"entry_point": "train.py", "environment": {"FI_PROVIDER": "efa"}}, tmp_path)
    blocked = preflight(wrong, api.dryrun(wrong))
    assert blocked.blocking
    console = Console(width=200, record=True)
    blocked.render(console)
    text = console.export_text()
    assert "preflight failed: nothing was started" in text and "--skip-preflight" in text
    local, _ = load({"entry_point": "train.py", "instance_count": 2}, tmp_path)
    assert not preflight(local, api.dryrun(local)).blocking


def _job(tmp_path: Path) -> tuple[Path, Path]:
    marker = tmp_path / "started"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    return script, marker


@pytest.mark.slow
def test_preflight_blocks_a_run_that_would_hang_at_nccls_init(tmp_path: Path) -> None:
    script, marker = _job(tmp_path)
    run = tenter("run", "--env", "FI_PROVIDER=efa", "--procs-per-host", "1", str(script))
    assert run.returncode == 2, run.stderr
    assert "preflight failed" in run.stderr
    assert "fabric-env" in run.stderr and "--skip-preflight" in run.stderr
    assert not marker.exists()


@pytest.mark.slow
def test_skip_preflight_starts_the_blocked_run_with_a_warning(tmp_path: Path) -> None:
    script, marker = _job(tmp_path)
    run = tenter(
        "run", "--env", "FI_PROVIDER=efa", "--procs-per-host", "1", "--skip-preflight", str(script)
    )
    assert "--skip-preflight: starting without checking" in run.stderr
    assert "preflight failed" not in run.stderr
    assert run.returncode == 0, run.stderr
    assert marker.exists()
