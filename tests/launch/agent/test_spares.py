"""Warm workers: a restarted worker runs from a spare that had torch imported, and starts as a
fresh worker would (the exact resume of a killed training is tests/launch/test_elastic.py's,
which runs with warm workers); workers start from spares by default, the first ones too."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tenter.contract.torchrun import torchrun_env, worker_env
from tenter.launch.agent import spares as warm_pool
from tenter.launch.agent.spares import PER_WORKER, differing
from tenter.launch.shared.processes import env_of, stat_fields
from tenter.runtime.warm import WAIT_FLAG
from tests.conftest import (
    AS_A_BACKGROUND_JOB,
    REPO,
    SCRIPTS,
    WAIT_S,
    Background,
    assert_nothing_left,
    tenter,
)
from tests.launch.specs import write_spec

pytestmark = pytest.mark.slow

TORCHRUN_WORKER_SIGNALS = {
    "SIGINT": str(signal.default_int_handler),
    "SIGQUIT": str(signal.SIG_DFL),
    "SIGTERM": str(signal.SIG_DFL),
    "SIGHUP": str(signal.SIG_DFL),
}
"""A worker of ``python -m torch.distributed.run`` (torch 2.13) started as a background job
(SIGINT and SIGQUIT ignored): its agent handles these before it starts the workers, so
they start with the defaults (and Python's KeyboardInterrupt for SIGINT)."""

TEMP_DIR_AT_IMPORT = "tests.launch.scripts.temp_dir_at_import"

PER_RUN = {"MASTER_PORT", "TENTER_WARM_WORKERS"}
"""Differ from one run to the next by design (the store's port), or by the test's choice."""


@pytest.mark.parametrize(("setting", "on"), [("", True), ("1", True), ("0", False)])
def test_workers_start_from_spares_unless_told_not_to(
    setting: str, on: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(warm_pool.ENABLED_ENV, setting)
    assert warm_pool.enabled() is on


def test_the_agent_can_start_a_fresh_template_before_it_imports_torch() -> None:
    # What the agent's command line imports before it starts a fresh template (a Slurm node's
    # agent beside the store's threads, tenter.launch.agent's main): torch's import, seconds,
    # is what the template's runs beside.
    code = (
        "import sys, tenter.launch.agent.main\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'torch'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_first_worker_is_a_spare_and_starts_as_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    starts = {}
    for warm in ("", "0"):
        monkeypatch.setenv("TENTER_WARM_WORKERS", warm)
        monkeypatch.setenv("TENTER_HOME", str(tmp_path / f"home-{warm or 'default'}"))
        done = tenter("run", str(write_spec(tmp_path, "record_start.py")))
        assert done.returncode == 0, done.stderr
        assert_nothing_left(done.job_dir)
        starts[warm] = _starts(done.job_dir)
        log = (done.job_dir / "logs/agent-algo-1.log").read_text()
        # One import of torch on the host: the template is a fork of the agent.
        assert ("warm template forked" in log) == (warm == ""), log
        assert "warm template started" not in log
    warm_start, fresh = starts[""]["rank-0.stdout"], starts["0"]["rank-0.stdout"]
    assert warm_start["warm"] and not fresh["warm"]
    assert {**warm_start, "warm": False} == fresh


def _starts(job_dir: Path) -> dict[str, dict[str, Any]]:
    """The name of a worker's stdout file -> what the worker recorded, with the run's job
    directory, id and tenter home replaced by placeholders."""
    out = {}
    for path in (job_dir / "start").glob("*.json"):
        text = path.read_text().replace(str(job_dir), "JOB_DIR").replace(job_dir.name, "JOB")
        text = text.replace(str(job_dir.parent.parent), "HOME")
        record = json.loads(text)
        record["env"] = {k: v for k, v in record["env"].items() if k not in PER_RUN}
        del record["pid"]
        out[path.stem] = record
    return out


def test_a_restarted_worker_runs_warm_and_starts_as_a_fresh_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields: dict[str, Any] = {
        "instance_count": 2,
        "processes_per_host": 2,
        "elastic": {"max_restarts": 1},
    }
    runs, agent_logs = {}, {}
    for warm in ("1", "0"):
        monkeypatch.setenv("TENTER_WARM_WORKERS", warm)
        monkeypatch.setenv("TENTER_HOME", str(tmp_path / f"home-{warm}"))
        # As CI starts it: a restarted rank's spare was started by an agent that inherited
        # these ignored, and a spare started while its agent stops workers ignores them too.
        done = tenter(
            "run",
            str(write_spec(tmp_path, "record_start.py", **fields)),
            ignored_signals=AS_A_BACKGROUND_JOB,
        )
        assert done.returncode == 0, done.stderr
        assert (
            "tenter: algo-1: a worker failed; restarting the workers (0 restarts left)"
            in done.stderr
        )
        assert_nothing_left(done.job_dir)
        runs[warm] = _starts(done.job_dir)
        agent_logs[warm] = "".join(p.read_text() for p in done.job_dir.glob("logs/agent-*.log"))
    warm_starts, fresh_starts = runs["1"], runs["0"]
    first = [f"rank-{r}.stdout" for r in range(4)]
    restarted = [f"rank-{r}.algo-{r // 2 + 1}.attempt-1.stdout" for r in range(4)]
    assert sorted(warm_starts) == sorted(fresh_starts) == sorted(first + restarted)
    assert [key for key in first + restarted if not warm_starts[key]["warm"]] == [], agent_logs["1"]
    assert not any(record["warm"] for record in fresh_starts.values())
    for key, record in [*warm_starts.items(), *fresh_starts.items()]:
        signals = {name: record["signals"][name] for name in TORCHRUN_WORKER_SIGNALS}
        assert signals == TORCHRUN_WORKER_SIGNALS, key
    for key, fresh in fresh_starts.items():
        warm_start = {**warm_starts[key], "warm": False}
        assert warm_start == fresh, key
        # The job's group restarts, the same on every rank (whichever host's worker failed).
        expected = "1" if "attempt-1" in key else "0"
        assert fresh["env"]["TORCHELASTIC_RESTART_COUNT"] == expected, key
    # The restarted rank 1 has its rank's variables, not those of the spare's first use.
    killed = warm_starts["rank-1.algo-1.attempt-1.stdout"]
    assert killed["env"]["RANK"] == "1"
    assert killed["env"]["TORCHELASTIC_RESTART_COUNT"] == "1"
    assert killed["streams"] == [
        "/dev/null",
        "JOB_DIR/logs/rank-1.algo-1.attempt-1.stdout",
        "JOB_DIR/logs/rank-1.algo-1.attempt-1.stderr",
    ]


def _spares(job_id: str) -> set[int]:
    """The job's spares: processes forked by its warm template that still wait (a worker's
    title is its command line)."""
    found = set()
    for proc in psutil.process_iter():
        try:
            parent = proc.parent()
            if (
                parent is not None
                and _is_warm(parent)
                and _is_warm(proc)
                and env_of(proc, "TENTER_JOB_ID") == job_id
            ):
                found.add(proc.pid)
        except psutil.Error:
            continue
    return found


def _is_warm(proc: psutil.Process) -> bool:
    # Its title (``python -m tenter.runtime.bootstrap --warm ...``) is one argument.
    return WAIT_FLAG in " ".join(proc.cmdline()).split()


def _wait_for_spare(job_id: str, besides: set[int], after: float) -> int:
    """A spare of the job other than ``besides``, started after ``after``: the agent has one
    forked within a monitor interval of needing it (as its workers start, once the template
    imported its preload modules, or once it lost one)."""
    for _ in range(600):
        new = {
            pid
            for pid in _spares(job_id) - besides
            if _started(pid) > after  # not one retired at the preload
        }
        if new:
            return min(new)
        time.sleep(0.1)  # polls for the condition; nothing to be notified by
    raise AssertionError(f"no spare other than {besides} appeared after {after}")


def _started(pid: int) -> float:
    """When ``pid`` started, in wall-clock seconds to a clock tick: psutil's create_time adds
    the boot time in whole seconds (/proc/stat's btime), up to a second early, and a spare
    forked just after the preload's log line could seem to come before it."""
    try:
        ticks = int(stat_fields(f"/proc/{pid}/stat")[19])
    except (OSError, IndexError, ValueError):
        return 0.0
    since_boot = ticks / os.sysconf("SC_CLK_TCK")
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME) + since_boot


def _preloaded_at(agent_log: Path) -> float:
    """When the agent had its template import the preload modules (and retired its spares)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        for line in agent_log.read_text().splitlines():
            if "spares forked before are retired" in line:
                stamp = datetime.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
                return stamp.timestamp()
        time.sleep(0.1)  # polls for the condition; nothing to be notified by
    raise AssertionError(f"the template never imported its preload modules: {agent_log}")


def _wait_for_rank_memory(job_dir: Path, rank: int) -> None:
    """Until the job's live view has recorded ``rank``'s memory (metrics.jsonl)."""
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        path = job_dir / "metrics.jsonl"
        text = path.read_text() if path.exists() else ""
        records = [json.loads(line) for line in text.split("\n")[:-1]]  # whole lines only
        if any(r["rank"] == rank and r.get("rss_bytes") for r in records):
            return
        time.sleep(0.2)  # polls for the condition; nothing to be notified by
    raise AssertionError(f"the live view never recorded rank {rank}'s memory")


def _ready_until_released(tmp_path: Path, tenter_home: Path, release: Path) -> Background:
    """A 1 x 1 job of record_start.py (one restart allowed) whose first rank says "ready",
    then exits with status 3 once ``release`` exists."""
    spec = write_spec(
        tmp_path,
        "record_start.py",
        instance_count=1,
        processes_per_host=1,
        elastic={"max_restarts": 1},
        environment={"RELEASE_FILE": str(release)},
    )
    job = Background("run", str(spec), home=tenter_home)
    job.wait_for("ready")
    return job


def test_a_spare_that_dies_waiting_is_replaced(tmp_path: Path, tenter_home: Path) -> None:
    release = tmp_path / "release"
    job = _ready_until_released(tmp_path, tenter_home, release)
    job_id = job.job_dir.name
    start = json.loads((job.job_dir / "start/rank-0.stdout.json").read_text())
    assert start["warm"]
    preloaded = _preloaded_at(job.job_dir / "logs/agent-algo-1.log")
    spare = _wait_for_spare(job_id, set(), after=preloaded)
    psutil.Process(spare).send_signal(signal.SIGKILL)
    _wait_for_spare(job_id, {spare}, after=preloaded)
    # The live view finds a warm worker's rank (its /proc environment is the spare's): rank 0
    # lives until released, and the view samples every second.
    _wait_for_rank_memory(job.job_dir, rank=0)
    release.touch()  # rank 0 exits with status 3: the host restarts its worker
    out = job.finish()
    assert job.proc.returncode == 0, out
    assert "attempt 1 rank 0 warm True" in out
    agent_log = (job.job_dir / "logs/agent-algo-1.log").read_text()
    assert f"warm worker {spare} exited while waiting (status -9)" in agent_log
    assert_nothing_left(job.job_dir)


def test_a_template_forked_from_the_agent_that_dies_is_started_again_fresh(
    tmp_path: Path, tenter_home: Path
) -> None:
    job = _ready_until_released(tmp_path, tenter_home, tmp_path / "never")
    start = json.loads((job.job_dir / "start/rank-0.stdout.json").read_text())
    template = psutil.Process(start["pid"]).parent()
    agent = template.parent()
    assert "tenter.launch.agent" in " ".join(agent.cmdline())  # a fork of the agent
    assert "--warm" in " ".join(template.cmdline())  # titled as a fresh one
    template.kill()  # its workers die with it (their parent-death signal)
    out = job.finish()
    assert job.proc.returncode == 0, out
    assert "attempt 1 rank 0 warm True" in out
    agent_log = (job.job_dir / "logs/agent-algo-1.log").read_text()
    assert f"warm template forked (pid {template.pid})" in agent_log
    # By now the agent runs threads (torch's rendezvous, the workers' store): no fork.
    assert "warm template exited (status -9)" in agent_log
    assert "warm template started" in agent_log
    assert_nothing_left(job.job_dir)


def test_a_killed_template_leaves_no_temporary_directory(tmp_path: Path) -> None:
    # As torch 2.7 does at import of torch.distributed.checkpoint, which the template preloads:
    # a directory that only atexit removes, and the template (with its spares) is SIGKILLed
    # when its pool closes.
    pool_tmp = tmp_path / "job/spares/algo-1"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    pool = warm_pool.WarmPool(
        sys.executable, 2, env, str(tmp_path), pool_tmp, preload=[TEMP_DIR_AT_IMPORT]
    )
    pool.fill()
    pool.preload()
    made = []
    deadline = time.monotonic() + WAIT_S
    while not made and time.monotonic() < deadline:
        made = list(pool_tmp.iterdir())
        time.sleep(0.1)  # polls for the condition; nothing to be notified by
    assert len(made) == 1, made  # the template's directory, in the pool's, not the machine's
    pool.close()
    assert not pool_tmp.exists() and not pool_tmp.parent.exists()
    assert list(Path(os.environ["TMPDIR"]).iterdir()) == []


@pytest.mark.parametrize("warm", ["1", "0"])
def test_a_worker_is_titled_with_the_users_command_line_warm_or_fresh(
    tmp_path: Path, tenter_home: Path, monkeypatch: pytest.MonkeyPatch, warm: str
) -> None:
    monkeypatch.setenv("TENTER_WARM_WORKERS", warm)
    release = tmp_path / "release"
    # The worker read is a restarted one, from a spare when the job has spares (its first
    # worker is one too).
    spec = write_spec(
        tmp_path,
        "titled.py",
        args=["--lr", "0.1", "--name", "a b"],
        environment={"RELEASE_FILE": str(release), "FAIL_FIRST_ATTEMPT": "1"},
        elastic={"max_restarts": 1},
    )
    job = Background("run", str(spec), home=tenter_home)
    try:
        job.wait_for("ready")
        pid = int(job.lines[-1].rsplit(" ", 1)[1])
        script = str(SCRIPTS / "titled.py")
        title = f"python {script} --lr 0.1 --name 'a b'"
        # As ps, top and pkill -f read it.
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().rstrip(b"\0").decode()
        assert cmdline.split("\0")[0] == title
        assert " ".join(psutil.Process(pid).cmdline()).strip() == title
        environ = psutil.Process(pid).environ()  # whole: tenter finds a job's processes by it
        assert environ["TENTER_JOB_ID"] == job.job_dir.name
        # A warm worker's initial environment is its spare's (the agent's), without a rank.
        assert ("RANK" in environ) == (warm == "0")
    finally:
        release.touch()
    out = job.finish(timeout=120)
    assert job.proc.returncode == 0, out
    assert_nothing_left(job.job_dir)


@pytest.mark.parametrize("resumes", [True, False])
def test_a_job_that_resumes_has_its_template_import_the_checkpointing_first(
    tmp_path: Path, resumes: bool
) -> None:
    # A checkpoint directory that holds anything: the workers will load a checkpoint at once,
    # each importing torch.distributed.checkpoint; the template imports it once, before it
    # forks them. Otherwise the first workers are forked as soon as torch is imported.
    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    if resumes:
        (checkpoints / "manifest.json").write_text("{}")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    bootstrap = [sys.executable, "-m", "tenter.runtime.bootstrap"]
    pool = warm_pool.WarmPool.for_workers(
        bootstrap, 1, env, str(tmp_path), tmp_path / "spares", str(checkpoints)
    )
    assert pool is not None
    try:
        pool.fill()
        out = tmp_path / "rank-0.stdout"
        argv = [*bootstrap, str(SCRIPTS / "has_modules.py"), "torch", "tenter.checkpoint"]
        worker = pool.take(argv, env, str(tmp_path), str(out), str(tmp_path / "rank-0.stderr"))
        assert worker is not None
        assert worker.wait() == 0
    finally:
        pool.close()
    assert out.read_text() == f"torch=True tenter.checkpoint={resumes}\n"
    assert not (tmp_path / "spares").exists()


def test_every_variable_the_agent_sets_per_worker_may_differ_from_the_spares() -> None:
    """PER_WORKER follows the contract: a variable added to torchrun_env or to the agent's
    own per-worker ones must not make every rank's environment differ from its spare's (each
    worker would start cold)."""
    shared = {"PATH": "/bin", "USER_VAR": "kept"}
    one, two = (
        worker_env(
            shared,
            torchrun_env(
                rank=rank,
                local_rank=rank,
                group_rank=0,
                local_world_size=2,
                num_hosts=1,
                master_addr="127.0.0.1",
                master_port="29500",
                run_id="job",
                max_restarts=1,
            ),
            error_file=f"rank-{rank}.error.json",
            watch_file=f"rank-{rank}.watch",
        )
        for rank in (0, 1)
    )
    assert differing(shared, one) <= PER_WORKER
    assert differing(one, two) <= PER_WORKER
    assert one["USER_VAR"] == "kept"
