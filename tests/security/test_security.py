"""A job's secrets, files and servers are its own (docs/security.md).

One real local job (2 hosts, a rank each, a secret by reference, metrics served beyond
loopback) runs once for the module, in a folder every user may enter, as a team's shared file
system is; while its ranks wait, the test reads every process's command line and asks its
metrics endpoint without the token; then a second real user of this machine tries to read
what the job left."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.error import HTTPError

import psutil
import pytest
import yaml

from tenter.contract.planner import make_plan
from tenter.doctor.checks import privacy
from tenter.doctor.result import JobContext, Status
from tenter.doctor.runner import run_checks
from tenter.doctor.system import System
from tenter.jobdir import layout, private
from tenter.launch.backends.kubernetes.mpi_launcher import serve_rank_envs
from tenter.spec import load, lookup
from tests.conftest import Background, job_checkpoints, job_dirs, tenter
from tests.security.kept import RANK, SECRET, assert_kept_yet_every_rank_has_it, every_cmdline

WRONG = {"Authorization": "Bearer not-the-token"}
PROBE_USER = "tenter-probe"
"""A second, unprivileged user of this machine (made if missing, then removed)."""
HOSTS, PROCS = 2, 1


def _reply(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """The status and body of a GET of ``url``."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {})) as r:
            return r.status, r.read()
    except HTTPError as e:
        return e.code, e.read()


def _job_processes(job_id: str) -> set[int]:
    """The processes that carry the job's id (the agents, templates, ranks)."""
    pids = set()
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("TENTER_JOB_ID") == job_id:
                pids.add(proc.pid)
    return pids


def _listening(pids: set[int]) -> set[tuple[str, int]]:
    """The addresses and ports the processes ``pids`` listen on."""
    return {
        (c.laddr.ip, c.laddr.port)
        for c in psutil.net_connections("inet")
        if c.pid in pids and c.status == psutil.CONN_LISTEN
    }


@dataclass
class SharedJob:
    jobs_root: Path
    job_dir: Path
    checkpoints: Path
    console: str
    cmdlines: list[str]
    job_processes: set[int]
    metrics: dict[str, tuple[int, bytes]]
    metrics_port: int
    listening: set[tuple[str, int]]
    """What the launcher and the job's processes listen on while the ranks run."""


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedJob]:
    home = tmp_path_factory.mktemp("security")
    # Open to every user, as a shared file system's folder is: what keeps the job's files
    # from them is tenter's doing, not this folder's.
    shared = Path(tempfile.mkdtemp(prefix="tenter-security-", dir="/tmp"))
    try:
        jobs_root = shared / "jobs"
        for folder in (shared, jobs_root, jobs_root / layout.CHECKPOINTS_DIR):
            folder.mkdir(exist_ok=True)
            folder.chmod(0o755)
        release = home / "release"
        spec = home / "job.yaml"
        spec.write_text(
            yaml.safe_dump(
                {
                    "entry_point": str(RANK),
                    "instance_count": HOSTS,
                    "processes_per_host": PROCS,
                    "output_dir": str(jobs_root),
                    "secrets": ["HF_TOKEN"],
                    "environment": {"RELEASE_FILE": str(release)},
                }
            )
        )
        (home / "tmp").mkdir()
        with pytest.MonkeyPatch.context() as env:
            env.setenv("TENTER_HOME", str(home / "tenter-home"))
            env.setenv("TMPDIR", str(home / "tmp"))
            env.setenv("HF_TOKEN", SECRET)
            run = Background(
                "run", str(spec), "--metrics-port", "0", "--metrics-addr", "0.0.0.0", home=shared
            )
        run.wait_for("ready", count=HOSTS * PROCS)
        if not any("Prometheus metrics at" in line for line in run.lines):
            run.wait_for("Prometheus metrics at")
        job_dir = run.job_dir
        [port] = re.findall(r"metrics at http://0\.0\.0\.0:(\d+)/metrics", "".join(run.lines))
        url = f"http://127.0.0.1:{port}/metrics"
        token = (job_dir / layout.METRICS_TOKEN_FILE).read_text()
        metrics = {
            "none": _reply(url),
            "wrong": _reply(url, WRONG),
            "token": _reply(url, private.bearer(token)),
        }
        cmdlines, processes = every_cmdline(), _job_processes(job_dir.name)
        listening = _listening({run.proc.pid, *processes})
        release.touch()
        console = run.finish()
        checkpoints = job_checkpoints(job_dir)
        yield SharedJob(
            jobs_root,
            job_dir,
            checkpoints,
            console,
            cmdlines,
            processes,
            metrics,
            int(port),
            listening,
        )
    finally:
        shutil.rmtree(shared, ignore_errors=True)


@pytest.fixture(scope="module")
def other_user() -> Iterator[str]:
    """``tenter-probe``; made for the module, and removed after it, if the machine lacks it."""
    if os.geteuid() != 0:
        pytest.skip("making a second user and acting as it needs root")
    if subprocess.run(["id", PROBE_USER], capture_output=True).returncode == 0:
        yield PROBE_USER
        return
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", PROBE_USER],
        check=True,
        timeout=60,
    )
    try:
        yield PROBE_USER
    finally:
        subprocess.run(["userdel", PROBE_USER], check=True, timeout=60)


def _as(user: str, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", user, "--", *argv], capture_output=True, text=True, timeout=60
    )


def test_another_user_cannot_read_the_jobs_directory_plan_logs_or_checkpoints(
    job: SharedJob, other_user: str
) -> None:
    # The other user reaches the folder the jobs are in: only tenter's modes stop them.
    listed = _as(other_user, "ls", str(job.jobs_root))
    assert listed.returncode == 0 and job.job_dir.name in listed.stdout, listed.stderr
    targets = [
        job.job_dir,
        job.job_dir / layout.PLAN_FILE,
        job.job_dir / "logs" / "rank-0.stdout",
        job.job_dir / layout.EVENTS_FILE,
        job.job_dir / "summary.json",
        job.checkpoints / "rank-0.ckpt",
    ]
    for target in targets:
        assert target.exists(), target
        tried = _as(other_user, "ls" if target.is_dir() else "cat", str(target))
        assert tried.returncode != 0 and "Permission denied" in tried.stderr, (target, tried)
    # And every file the job made is its user's alone, should a folder's mode open later.
    made = [*job.job_dir.rglob("*"), job.job_dir, *job.checkpoints.rglob("*"), job.checkpoints]
    shared = [f"{p} {p.stat().st_mode:o}" for p in made if not p.is_symlink()]
    assert [s for s in shared if int(s.split()[-1], 8) & 0o077] == []


def test_the_secret_is_written_nowhere_and_shown_to_no_one_yet_every_rank_has_it(
    job: SharedJob,
) -> None:
    assert len(job.job_processes) >= HOSTS * (PROCS + 1)  # the scan saw the job's processes
    assert_kept_yet_every_rank_has_it(job.job_dir, job.console, job.cmdlines, HOSTS * PROCS)


def test_on_the_mpi_backend_the_secret_reaches_every_rank_by_name_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    release = tmp_path / "release"
    spec = tmp_path / "job.yaml"
    job = {"entry_point": str(RANK), "instance_count": 2, "processes_per_host": 1}
    job |= {"secrets": ["HF_TOKEN"], "environment": {"RELEASE_FILE": str(release)}}
    spec.write_text(yaml.safe_dump(job))
    monkeypatch.setenv("HF_TOKEN", SECRET)
    run = Background("run", "--backend", "mpi", str(spec))
    try:
        run.wait_for("ready", count=2)
        cmdlines = every_cmdline()  # mpirun's among them: -x HF_TOKEN, the name only
    finally:
        release.touch()
    console = run.finish()
    assert run.proc.returncode == 0, console
    assert any("mpirun" in c and "HF_TOKEN" in c for c in cmdlines)
    assert_kept_yet_every_rank_has_it(run.job_dir, console, cmdlines, 2)


def test_the_metrics_endpoint_beyond_loopback_answers_only_with_the_jobs_token(
    job: SharedJob,
) -> None:
    assert job.metrics["none"] == (403, b"")
    assert job.metrics["wrong"] == (403, b"")
    status, body = job.metrics["token"]
    assert status == 200 and b"tenter_rank_step" in body


def test_every_socket_the_job_listens_on_is_on_its_hosts_addresses(job: SharedJob) -> None:
    plan = json.loads((job.job_dir / layout.PLAN_FILE).read_text())
    addrs = {host["addr"] for host in plan["hosts"]}
    assert job.listening  # the stores the job serves, at least
    # Metrics are where --metrics-addr put them (0.0.0.0 here: behind the token).
    assert {ip for ip, port in job.listening if port != job.metrics_port} <= addrs
    assert ("0.0.0.0", job.metrics_port) in job.listening


def test_the_mpijob_launchers_rank_environments_answer_only_with_the_token(
    tmp_path: Path,
) -> None:
    (tmp_path / "train.py").write_text("")
    spec, _ = load({"entry_point": "train.py", "instance_count": 2}, tmp_path)
    plan = make_plan(spec, "job", tmp_path, sys.executable)
    token = private.new_token()
    server = serve_rank_envs(plan, "127.0.0.1", token)
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/rank"
        url = f"{base}/1"
        assert _reply(url) == (403, b"")
        assert _reply(url, WRONG) == (403, b"")
        assert _reply(f"{base}/9", WRONG) == (403, b"")  # says nothing of ranks
        assert _reply(url, private.bearer(token))[0] == 200
    finally:
        server.shutdown()
        server.server_close()


def test_tenter_plan_names_the_secret_on_every_backend_and_shows_no_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    (tmp_path / "train.py").write_text("")
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"entry_point": "train.py", "secrets": ["HF_TOKEN"]}))
    as_json = tenter("plan", str(spec), "--json", cwd=tmp_path)  # what plan.json would hold
    assert as_json.returncode == 0, as_json.stderr
    assert '"secrets": ["HF_TOKEN"]' in as_json.stdout
    assert SECRET not in as_json.stdout + as_json.stderr
    # The text shows all of the plan, the launcher's command and the files it writes (sbatch).
    for backend, forwarded in (("local", ""), ("mpi", "-x HF_TOKEN"), ("slurm", "--export=ALL")):
        shown = tenter("plan", str(spec), "--backend", backend, cwd=tmp_path)
        assert shown.returncode == 0, shown.stderr
        assert "HF_TOKEN=<secret" in shown.stdout
        # How the value reaches remote hosts, by name: mpirun's -x, sbatch's exported environment.
        assert forwarded in shown.stdout
        assert SECRET not in shown.stdout + shown.stderr
    k8s = tmp_path / "k8s.yaml"
    k8s.write_text(
        yaml.safe_dump(
            {
                "entry_point": "train.py",
                "backend": "kubernetes",
                "instance_type": "ml.p5.48xlarge",
                "kubernetes": {"image": "train:1"},
                "secrets": {"HF_TOKEN": {"secret": "hf", "key": "token"}},
            }
        )
    )
    shown = tenter("plan", str(k8s), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "secretKeyRef" in shown.stdout and SECRET not in shown.stdout + shown.stderr


def test_a_secret_missing_from_the_environment_is_bad_input_and_nothing_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tenter_home: Path
) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    (tmp_path / "train.py").write_text("")
    done = tenter("run", "--secret", "HF_TOKEN", str(tmp_path / "train.py"), cwd=tmp_path)
    assert done.returncode == 2
    assert "secrets.HF_TOKEN: HF_TOKEN is not set" in done.stderr
    assert job_dirs(tenter_home / "jobs") == []


def test_a_secret_named_like_tenters_or_torchs_own_variables_is_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tenter_home: Path
) -> None:
    # Its value would be replaced by tenter's (RANK...), or would steer tenter (TENTER_*).
    names = ("MASTER_ADDR", "TENTER_JOB_ID", "TENTER_TOKEN")
    for name in names:
        monkeypatch.setenv(name, SECRET)
    (tmp_path / "train.py").write_text("")
    flags = [arg for name in names for arg in ("--secret", name)]
    done = tenter("run", *flags, str(tmp_path / "train.py"), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "secrets.MASTER_ADDR: is set by tenter for every process" in done.stderr
    assert "secrets.TENTER_JOB_ID: is set by tenter for every process from the spec" in done.stderr
    assert "Fix: set name in the spec, or --name instead" in done.stderr
    assert "secrets.TENTER_TOKEN: TENTER_* names are tenter's own" in done.stderr
    assert "Traceback" not in done.stderr and SECRET not in done.stderr
    assert job_dirs(tenter_home / "jobs") == []


def test_a_credential_in_plain_environment_is_warned_of(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    shown = tenter("plan", "--env", "WANDB_API_KEY=abc", str(tmp_path / "train.py"), cwd=tmp_path)
    assert "environment.WANDB_API_KEY: looks like a credential" in shown.stderr
    assert "--secret WANDB_API_KEY" in shown.stderr


def test_doctor_warns_of_a_world_readable_output_directory(tmp_path: Path) -> None:
    itype = lookup("local")
    assert itype is not None
    folder = tmp_path / "jobs"
    folder.mkdir()
    context = JobContext(itype, procs_per_host=1, output_dir=str(folder))
    for mode, status in ((0o755, Status.WARN), (0o700, Status.PASS)):
        folder.chmod(mode)
        report = run_checks(System(), context, (privacy.OUTPUT_DIR,))
        assert report.outcomes[0].result.status == status, report.outcomes
