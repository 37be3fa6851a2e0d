"""The CLI's contract: help, bad input (exit 2, nothing created), plan output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tenter.cli.main import COMMANDS, build_parser, main
from tenter.contract.plan import Plan
from tests.conftest import REPO

BAD_SPEC = """
name: bad
entry_point: missing.py
processes_per_host: 0
instance_type: ml.p4d.24xlarg
distribution:
  mpi: {enabled: true, process_per_host: 2}
channels: {train: /nope}
"""


def test_every_command_has_a_help_text(capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("--help", *(f"{c} --help" for c in COMMANDS)):
        with pytest.raises(SystemExit) as info:
            main(name.split())
        assert info.value.code == 0
    assert "--procs-per-host" in capsys.readouterr().out


def test_the_run_flags_are_frozen() -> None:
    # A new flag is a public promise: add it here on purpose, not by accident.
    run = build_parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    flags = sorted(o for a in run._actions for o in a.option_strings)
    assert flags == sorted(
        [
            "-h",
            "--help",
            "-m",
            "--module",
            "--no-python",
            "--hosts",
            "--checkpoint-dir",
            "--procs-per-host",
            "--instance-type",
            "--backend",
            "--isolation",
            "--name",
            "--source-dir",
            "--output-dir",
            "--max-run",
            "--env",
            "--secret",
            "--hp",
            "--channel",
            "--ranks",
            "--no-tag",
            "--partition",
            "--account",
            "--qos",
            "--hostfile",
            "--skip-preflight",
            "--detach",
            "--live",
            "--no-live",
            "--metrics-port",
            "--metrics-addr",
            # torchrun's, with its underscore spellings (docs/launch.md has the table)
            "--no_python",
            "--nnodes",
            "--nproc-per-node",
            "--nproc_per_node",
            "--max-restarts",
            "--max_restarts",
            "--rdzv-backend",
            "--rdzv_backend",
            "--rdzv-endpoint",
            "--rdzv_endpoint",
            "--rdzv-id",
            "--rdzv_id",
            "--rdzv-conf",
            "--rdzv_conf",
            "--standalone",
            "--node-rank",
            "--node_rank",
            "--master-addr",
            "--master_addr",
            "--master-port",
            "--master_port",
            "--log-dir",
            "--log_dir",
            "-r",
            "--redirects",
            "-t",
            "--tee",
            "--local-ranks-filter",
            "--local_ranks_filter",
            "--start-method",
            "--start_method",
            "--monitor-interval",
            "--monitor_interval",
            "--role",
        ]
    )


@pytest.mark.parametrize("command", ["run", "plan"])
def test_bad_spec_exits_2_listing_every_problem_and_creates_nothing(
    command: str, tmp_path: Path, tenter_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(BAD_SPEC)
    assert main([command, str(spec)]) == 2
    err = capsys.readouterr().err
    assert "the job spec has 5 problems:" in err
    for text in (
        "processes_per_host: 0 is not greater than 0. Fix: make it greater than 0",
        "Fix: rename it to 'processes_per_host'",
        "Did you mean 'ml.p4d.24xlarge'?",
        "channels.train: '/nope' does not exist",
        "entry_point: 'missing.py' does not exist",
    ):
        assert text in err
    assert not tenter_home.exists()


def test_bad_flag_values_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--env", "NOEQUALS", "x.py"]) == 2
    assert "--env: 'NOEQUALS' is not KEY=VALUE" in capsys.readouterr().err
    with pytest.raises(SystemExit) as info:
        main(["plan", "--hosts", "two", "x.py"])
    assert info.value.code == 2


def test_plan_prints_the_json_the_backend_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "plan",
                "--json",
                "--job-id",
                "j-1",
                str(REPO / "examples/digits/job.yaml"),
                "--hosts",
                "3",
                "--",
                "--seed",
                "7",
            ]
        )
        == 0
    )
    plan = json.loads(capsys.readouterr().out)
    assert plan["job_id"] == "j-1"
    assert [h["name"] for h in plan["hosts"]] == ["algo-1", "algo-2", "algo-3"]
    assert plan["command"][-2:] == ["--seed", "7"]


def test_plan_out_writes_the_plan_the_job_directory_keeps_if_the_backend_runs_agents(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = str(REPO / "examples/digits/job.yaml")
    assert main(["plan", "--json", "--job-id", "j-1", job]) == 0
    printed = capsys.readouterr().out
    assert main(["plan", "--out", str(tmp_path / "out"), "--job-id", "j-1", job]) == 0
    assert capsys.readouterr().out == f"{tmp_path / 'out' / 'plan.json'}\n"
    assert (tmp_path / "out" / "plan.json").read_text() + "\n" == printed


def test_plan_text_shows_shared_environment_once_and_per_rank_differences(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan", "--job-id", "j-1", str(REPO / "examples/digits/job.yaml")]) == 0
    out = capsys.readouterr().out
    assert "size        2 hosts x 2 processes = 4 ranks" in out
    assert out.splitlines().count("  WORLD_SIZE=4") == 1
    assert "host algo-2 (127.101.0.1)" in out
    assert "  rank 3 (local 1):\n    GROUP_RANK=1\n    LOCAL_RANK=1\n    RANK=3" in out


def test_plan_rank_shows_the_whole_environment_the_json_gives_that_rank(
    capsys: pytest.CaptureFixture[str],
) -> None:
    job = [str(REPO / "examples/digits/job.yaml"), "--hosts", "3", "--backend", "slurm"]
    assert main(["plan", "--json", "--job-id", "j-1", *job]) == 0
    plan = Plan.from_json(capsys.readouterr().out)
    host = plan.hosts[2]
    assert main(["plan", "--rank", "5", "--job-id", "j-1", *job]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("rank 5 (local 1) on host algo-3")
    env = plan.process_env(host, host.ranks[1])
    assert out[out.index(f"environment ({len(env)} variables):") + 1 :] == [
        f"  {k}={v}" for k, v in sorted(env.items())
    ]
    assert f"stdout      {host.ranks[1].stdout}" in out


def test_plan_rank_outside_the_job_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--rank", "4", str(REPO / "examples/digits/job.yaml")]) == 2
    assert "--rank: this job has no rank 4. Fix: give a rank from 0 to 3" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("backend", "more"),
    [
        ("local", "fault_tolerance: {replica_groups: 2}\n"),  # its torch check is the launch's
        ("slurm", "fault_tolerance: {replica_groups: 2}\n"),
        ("mpi", ""),
    ],
)
def test_planning_a_job_imports_no_torch(tmp_path: Path, backend: str, more: str) -> None:
    # `tenter run` plans before it starts anything: torch's import (a second or more) there
    # would come before the agents', which import it again; the launcher imports it for the
    # store only once the agents started (tenter.launch.launcher.supervisor).
    (tmp_path / "train.py").write_text("")
    spec = tmp_path / "job.yaml"
    spec.write_text(f"entry_point: train.py\ninstance_count: 2\n{more}")
    code = (
        "import sys\n"
        "from tenter.cli.main import main\n"
        f"assert main(['plan', {str(spec)!r}, '--backend', {backend!r}]) == 0\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
