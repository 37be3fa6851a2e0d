"""The mpi backend: golden mpirun argv, custom_mpi_options merging, and real Open MPI runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tenter.cli.cmd_plan import render_command
from tenter.contract.plan import Plan
from tenter.contract.planner import make_plan
from tenter.errors import ExitCode
from tenter.launch import api
from tenter.launch.backends.mpirun import mpirun_argv
from tenter.spec import load
from tests.conftest import (
    REPO,
    SCRIPTS,
    Background,
    assert_golden,
    assert_nothing_left,
    job_processes,
    tenter,
)

GOLDEN = Path(__file__).parent / "golden"
DIGITS = REPO / "examples" / "digits"


def _spec(instance_type: str, custom: str = "", backend: str = "mpi") -> object:
    spec, _ = load(
        {
            "name": "golden",
            "entry_point": "train.py",
            "source_dir": str(DIGITS),
            "instance_count": 2,
            "instance_type": instance_type,
            "hyperparameters": {"epochs": 3},
            "backend": backend,
            "distribution": {"mpi": {"enabled": True, "custom_mpi_options": custom}},
        },
        REPO,
    )
    return spec


def _normalised(text: str, tenter_home: Path) -> str:
    return (
        text.replace(str(tenter_home), "$TENTER_HOME")
        .replace(sys.executable, "$PYTHON")
        .replace(str(REPO), "$REPO")
    )


def _mpirun_plan(instance_type: str, custom: str = "") -> Plan:
    return api.get_backend("mpi").dryrun(_spec(instance_type, custom), "golden-job")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("instance_type", "golden"),
    [("ml.p4d.24xlarge", "mpirun-p4d-2hosts.txt"), ("ml.p3.8xlarge", "mpirun-p3-2hosts.txt")],
)
def test_dryrun_renders_the_whole_mpirun_command(
    instance_type: str, golden: str, tenter_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)  # --allow-run-as-root only as root
    plan = _mpirun_plan(instance_type)
    argv = plan.launcher
    assert_golden(GOLDEN / golden, _normalised(render_command(argv), tenter_home) + "\n")
    assert "--allow-run-as-root" not in argv
    contexts = " ".join(argv).split(" : ")
    assert len(contexts) == 2
    for flag in ("--tag-output", "--bind-to", "--map-by"):
        assert argv.count(flag) == 1
    mca = [value.split()[0] for value in _values(argv, "--mca", 2)]
    assert len(mca) == len(set(mca))
    assert "btl_vader_single_copy_mechanism" in mca
    assert "orte_abort_on_non_zero_status" in mca
    efa = ("FI_PROVIDER=efa", "FI_EFA_USE_DEVICE_RDMA=1", "RDMAV_FORK_SAFE=1", "NCCL_PROTO=simple")
    for index, context in enumerate(contexts):
        # The shim reads each host's environment from the plan, not from the command line.
        assert f"-x TENTER_PLAN={plan.job_dir}/plan.json " in context
        assert "SM_" not in context
        # Each host's own values, not the master's (SageMaker's toolkit bug).
        host = plan.hosts[index]
        env = plan.process_env(host, host.ranks[0])
        assert env["SM_CURRENT_HOST"] == f"algo-{index + 1}"
        assert json.loads(env["SM_TRAINING_ENV"])["current_host"] == f"algo-{index + 1}"
        for var in efa:
            name, _, value = var.partition("=")
            assert env.get(name) == (value if instance_type == "ml.p4d.24xlarge" else None)


def test_allow_run_as_root_only_as_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert _mpirun_plan("ml.p3.8xlarge").launcher[1] == "--allow-run-as-root"


def test_custom_mpi_options_replace_defaults_instead_of_repeating_them() -> None:
    custom = (
        "--mca btl_vader_single_copy_mechanism cma -x NCCL_PROTO=LL128 -x SM_LOG_LEVEL=10 "
        "-bind-to core --mca my_param 7 -x MY_VAR --display-map"
    )
    argv = _mpirun_plan("ml.p4d.24xlarge", custom).launcher
    mca = _values(argv, "--mca", 2)
    exported = _values(argv, "-x", 1)
    assert mca.count("btl_vader_single_copy_mechanism cma") == 1
    assert "btl_vader_single_copy_mechanism none" not in mca
    assert mca.count("my_param 7") == 1
    assert mca.count("orte_abort_on_non_zero_status 1") == 1  # untouched defaults stay, once
    # -x belongs to an app context: once per host, the user's value instead of ours.
    assert exported.count("NCCL_PROTO=LL128") == 2 and "NCCL_PROTO=simple" not in exported
    assert exported.count("SM_LOG_LEVEL=10") == 2 and "SM_LOG_LEVEL=20" not in exported
    assert exported.count("MY_VAR") == 2
    assert argv.count("-bind-to") == 1 and "--bind-to" not in argv
    assert argv.count("--display-map") == 1 and argv.count("--map-by") == 1


def test_dryrun_takes_the_hosts_of_the_hostfile_and_the_mca_block(
    tenter_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    spec, _ = load(
        {
            "name": "golden",
            "entry_point": "train.py",
            "source_dir": str(DIGITS),
            "instance_count": 2,
            "instance_type": "ml.p3.8xlarge",
            "backend": "mpi",
            "mpirun": {
                "hostfile": str(Path(__file__).parent / "hostfile.txt"),
                "mca": {"btl_tcp_if_include": "ens5", "plm_rsh_args": "-p 2222"},
            },
        },
        REPO,
    )
    argv = api.get_backend("mpi").dryrun(spec, "golden-job").launcher  # type: ignore[attr-defined]
    text = _normalised(render_command(argv), tenter_home) + "\n"
    assert_golden(GOLDEN / "mpirun-p3-hostfile.txt", text)
    assert argv.count("--hostfile") == 1 and argv.count("btl_tcp_if_include") == 1
    assert [argv[i + 1] for i, a in enumerate(argv) if a == "--host"] == ["node-a", "node-b"]


def _values(argv: list[str], flag: str, n: int) -> list[str]:
    return [" ".join(argv[i + 1 : i + 1 + n]) for i, a in enumerate(argv) if a == flag]


def test_mpirun_argv_runs_host_i_of_the_plan_on_the_given_host_i(tenter_home: Path) -> None:
    spec = _spec("ml.p4d.24xlarge")
    hosts = ["job-worker-0.job", "job-worker-1.job"]
    plan = make_plan(spec, "j", tenter_home, "python3", addrs=hosts)  # type: ignore[arg-type]
    argv = mpirun_argv(
        plan,
        hosts,
        8,
        "python3",
        user_options=spec.mpi_options(),  # type: ignore[attr-defined]
        network_interface="eth0",
        master_port="29500",
        hostfile="/etc/mpi/hostfile",
        plan_source="http://10.0.0.7:41000",
    )
    text = " ".join(argv)
    assert text.count("-x TENTER_PLAN=http://10.0.0.7:41000 ") == 2
    assert "--hostfile /etc/mpi/hostfile" in text
    assert "--host job-worker-0.job -x" in text and "--host job-worker-1.job -x" in text
    assert text.count("-x MASTER_ADDR=job-worker-0.job") == 2
    assert text.count("-x MASTER_PORT=29500") == 2
    assert text.count("-x TORCHELASTIC_USE_AGENT_STORE=False") == 2  # rank 0 serves the store


def test_malformed_custom_mpi_options_are_rejected_with_the_field(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        f"entry_point: train.py\nsource_dir: {DIGITS}\nbackend: mpi\n"
        "distribution: {mpi: {enabled: true, custom_mpi_options: '--mca btl'}}\n"
    )
    done = tenter("plan", str(spec))
    assert done.returncode == 2
    assert "distribution.mpi.custom_mpi_options: '--mca btl' '--mca' needs a parameter" in (
        done.stderr
    )


def test_unknown_backend_is_rejected_with_a_suggestion() -> None:
    done = tenter("plan", "--backend", "mpii", str(SCRIPTS / "contract.py"))
    assert done.returncode == 2
    assert "backend: 'mpii' is not a launch backend" in done.stderr
    assert "Did you mean 'mpi'?" in done.stderr


def test_missing_mpirun_is_an_error_that_names_the_fix(tenter_home: Path) -> None:
    env = {**os.environ, "PATH": "/nonexistent"}
    script = str(SCRIPTS / "contract.py")
    # The preflight fails the job as bad input (2); past it, the backend's own check names the
    # missing tool (5).
    for preflight, code, says in (
        ([], 2, "mpirun not found"),
        (["--skip-preflight"], 5, "mpirun is not on PATH"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "tenter", "run", "--backend", "mpi", *preflight, script],
            capture_output=True,
            text=True,
            env=env,
            cwd=REPO,
            timeout=120,
        )
        assert proc.returncode == code, proc.stderr
        assert says in proc.stderr
        assert "install Open MPI" in proc.stderr
    assert not (tenter_home / "jobs").exists()  # nothing created


# Real Open MPI from here on (Debian openmpi-bin, installed by scripts/install-system-deps.sh).


@pytest.mark.slow
def test_mpirun_ranks_get_the_contract_of_their_own_host() -> None:
    hostile = "a b 'c'; $(touch /tmp/tenter-pwned)"
    done = tenter(
        "run",
        "--backend",
        "mpi",
        "--hosts",
        "2",
        "--procs-per-host",
        "2",
        "--hp",
        f"note={hostile}",
        str(SCRIPTS / "contract.py"),  # a plain init_process_group("gloo") script
    )
    assert done.returncode == 0, done.stderr
    plan = Plan.from_json((done.job_dir / "plan.json").read_text())
    assert plan.launcher[0] == "mpirun"
    for host in plan.hosts:
        for rank in host.ranks:
            seen = json.loads((Path(host.dir) / f"output/data/rank-{rank.rank}.json").read_text())
            env = seen["env"]
            planned = plan.process_env(host, rank)
            assert env["SM_CURRENT_HOST"] == host.name
            assert json.loads(env["SM_TRAINING_ENV"])["current_host"] == host.name
            assert env["OMPI_COMM_WORLD_RANK"] == planned["RANK"]
            assert seen["argv"] == ["--note", hostile]
    assert not Path("/tmp/tenter-pwned").exists()
    assert "[algo-2,3]<stdout>: rank 3 of 4 on algo-2: all_reduce ok" in done.stdout
    assert_nothing_left(done.job_dir)


@pytest.mark.slow
@pytest.mark.parametrize(("hosts", "procs"), [(1, 2), (2, 2)])
def test_digits_example_trains_through_mpirun(hosts: int, procs: int) -> None:
    done = tenter(
        "run",
        "--backend",
        "mpi",
        str(DIGITS / "job.yaml"),
        "--hosts",
        str(hosts),
        "--procs-per-host",
        str(procs),
        "--hp",
        "epochs=8",
    )
    assert done.returncode == 0, done.stderr
    metrics = json.loads((done.job_dir / "hosts/algo-1/model/metrics.json").read_text())
    assert metrics["test_accuracy"] >= 0.94
    assert f"training on {hosts * procs} ranks" in done.stdout
    assert_nothing_left(done.job_dir)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "expected"),
    [("raise", "ValueError: boom at step 3"), ("kill", "signal 9 (SIGKILL, exit code 137)")],
)
def test_a_failing_rank_is_the_root_cause_under_mpirun(mode: str, expected: str) -> None:
    done = tenter(
        "run",
        "--backend",
        "mpi",
        "--hosts",
        "2",
        "--procs-per-host",
        "2",
        "--env",
        f"FAIL_MODE={mode}",
        str(SCRIPTS / "fail.py"),
    )
    assert done.returncode == ExitCode.JOB_FAILED  # the rank's own status is in the summary
    summary = done.stderr[done.stderr.index("FAILED after") :]
    assert "root cause: rank 3 on host algo-2 (local rank 1" in summary
    assert expected in summary
    assert_nothing_left(done.job_dir)


@pytest.mark.slow
def test_perf_launches_through_mpirun() -> None:
    done = tenter(
        "perf", "all_reduce", "-b", "8", "-e", "64", "-n", "2", "-w", "1", "--launcher", "mpi"
    )
    assert done.returncode == 0, done.stderr
    assert "# Out of bounds values : 0 OK" in done.stdout
    assert_nothing_left(done.job_dir)


@pytest.mark.slow
def test_a_killed_launcher_leaves_no_rank_running() -> None:
    job = Background(
        "run", "--backend", "mpi", "--hosts", "2", "--procs-per-host", "1",
        str(SCRIPTS / "block.py"),
    )  # fmt: skip
    job.wait_for("ready 0", "ready 1")
    procs = job_processes(job.job_dir.name)
    assert len(procs) == 3  # mpirun and its two ranks
    job.proc.kill()
    job.finish()
    # No sweep: mpirun gets SIGTERM from the kernel, and each rank when mpirun ends.
    _, alive = psutil.wait_procs(procs, timeout=60)
    assert alive == [], [p.cmdline() for p in alive]


def test_a_rank_mpirun_saw_killed_is_reported_as_its_agent_would(tenter_home: Path) -> None:
    # mpirun's ranks have no agent: the launcher writes their host's record from mpirun's log,
    # through the agents' own writer, and reads it back as on every backend.
    from tenter.jobdir import layout
    from tenter.jobdir.agent_result import read_result
    from tenter.jobdir.line_files import record_worker_logs
    from tenter.launch.backends.mpi.backend import MpiJob
    from tenter.launch.diagnosis.root_cause import collect_failures
    from tenter.launch.launcher.output import create_job_dir

    plan = _mpirun_plan("ml.p3.8xlarge")
    create_job_dir(plan)
    logs = layout.logs_dir(plan.job_dir)
    for host in plan.hosts:
        for r in host.ranks:
            stem = plan.log_stem(host.name, r.rank, 0)
            record_worker_logs(logs, stem, r.rank, r.local_rank, host.name, 0, plan.world_size)
    killed = plan.procs_per_host + 1  # the second rank of the second host
    (logs / layout.MPIRUN_LOG).write_text(
        f"mpirun noticed that process rank {killed} with PID 4242 on node algo-2 exited on "
        "signal 9 (Killed).\n"
    )
    MpiJob(plan).collect_extra_failures()

    assert read_result(plan.hosts[0].dir) is None
    record = read_result(plan.hosts[1].dir)
    assert record is not None and record.state == "FAILED"
    assert [(f.rank, f.local_rank, f.pid, f.exit_code) for f in record.failures] == [
        (killed, 1, 4242, -9)
    ]
    failures, agent_errors, _ = collect_failures(plan, None)
    assert agent_errors == []
    assert [(f.host, f.rank, f.pid, f.exit_code) for f in failures] == [
        ("algo-2", killed, 4242, -9)
    ]
