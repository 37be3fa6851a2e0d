"""Shared fixtures: every test gets its own TENTER_HOME and TMPDIR, and end-to-end tests
check that a job leaves no process, port or temp file behind."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import queue
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, NoReturn

import psutil
import pytest

from tenter.jobdir import layout
from tenter.spec.catalog import GPU_LISTING_ENV

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = Path(__file__).parent / "launch" / "scripts"

INDUCTOR_CACHE = pytest.StashKey[str]()


def pytest_configure(config: pytest.Config) -> None:
    """torch makes its compile cache (``/tmp/torchinductor_$USER`` unless told otherwise)
    when the tests import ``torch.distributed.pipelining``: the session's own, removed at its
    end. (A hook, not import-time code: tests import this module a second time by name.)"""
    if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        config.stash[INDUCTOR_CACHE] = tempfile.mkdtemp(prefix="tenter-tests-torchinductor-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = config.stash[INDUCTOR_CACHE]


def pytest_unconfigure(config: pytest.Config) -> None:
    if INDUCTOR_CACHE in config.stash:
        shutil.rmtree(config.stash[INDUCTOR_CACHE], ignore_errors=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``cuda`` (the GPU check suite, ``make test-gpu``) skip without CUDA."""
    cuda_tests = [item for item in items if item.get_closest_marker("cuda")]
    if not cuda_tests:
        return
    import torch  # only when such tests are collected: the CLI tests need no torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (the GPU check suite: make test-gpu)")
    for item in cuda_tests:
        item.add_marker(skip)


@pytest.fixture(autouse=True)
def tenter_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "tenter-home"
    monkeypatch.setenv("TENTER_HOME", str(home))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    return home


SHORT_STOP_GRACE_S = 2
"""The stop grace period (TENTER_STOP_GRACE_S) of tests whose ranks ignore SIGTERM: their stop
waits it out before SIGKILL, and the default 10 s would only make them slower."""


@pytest.fixture
def short_stop_grace(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENTER_STOP_GRACE_S", str(SHORT_STOP_GRACE_S))


@pytest.fixture
def fake_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[int], Path]:
    """``fake_gpus(n)``: this machine shows ``n`` GPUs to tenter's catalog (a stand-in for
    the driver's /proc/driver/nvidia/gpus listing, one entry per GPU, as the driver names
    them by PCI address), and no CUDA_VISIBLE_DEVICES narrows them."""

    def make(count: int) -> Path:
        listing = tmp_path / f"nvidia-gpus-{count}"
        listing.mkdir()
        for index in range(count):
            (listing / f"0000:{index + 0x18:02x}:00.0").mkdir()
        monkeypatch.setenv(GPU_LISTING_ENV, str(listing))
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        return listing

    return make


def own_children() -> list[psutil.Process]:
    """This test process's descendants, less Python's multiprocessing resource tracker:
    spawn-mode tests start it once and it lives as long as pytest, by design."""
    out = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if "multiprocessing.resource_tracker" not in " ".join(proc.cmdline()):
                out.append(proc)
        except psutil.Error:
            continue
    return out


@pytest.fixture(autouse=True)
def umask_kept() -> Iterator[None]:
    """Put back the umask a test changed: `tenter run` in the test's own process sets the job's
    (private.enter, 077), and the tests after it would create their files private (munged
    refuses a socket folder others cannot enter)."""
    umask = os.umask(0o022)
    os.umask(umask)
    yield
    os.umask(umask)


@pytest.fixture(autouse=True)
def no_stray_processes() -> Iterator[None]:
    """Fail the test that leaves a child process running (those of longer-lived fixtures,
    started before the test, are not its own)."""
    before = {p.pid for p in own_children()}
    yield
    new = [p for p in own_children() if p.pid not in before]
    _, alive = psutil.wait_procs(new, timeout=10)
    for proc in alive:
        proc.kill()
    assert not alive, f"the test left processes running: {[p.cmdline() for p in alive]}"


def job_dirs(jobs_root: Path) -> list[Path]:
    """The job directories under ``jobs_root`` (beside them: the jobs' checkpoint folders)."""
    return sorted(p.parent for p in jobs_root.glob(f"*/{layout.PLAN_FILE}"))


def warning_lines(job_dir: Path, *console: str) -> list[str]:
    """The lines of a job's console output and of its logs (every rank's, the agents', the
    lighthouse's) that a warning wrote: Python's (``...: UserWarning: ...`` and the
    ``warnings.warn(`` source line under it) and c10's (``[W...] Warning: ...``). The logs
    hold what the console leaves out (``logs.ranks``) and what a rank wrote before it ended."""
    logs = (p.read_text(errors="replace") for p in sorted((job_dir / "logs").iterdir()))
    return [
        line
        for text in (*console, *logs)
        for line in text.splitlines()
        if "Warning" in line or "warn(" in line
    ]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB file system of its own (tmpfs), unmounted after the test."""
    mount = tmp_path / "disk"
    mount.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], check=True, timeout=60
    )
    yield mount
    subprocess.run(["umount", str(mount)], check=True, timeout=60)


def fill(path: Path) -> None:
    """Write ``path`` until its file system is full (a tmpfs: a few MiB)."""
    with open(path, "wb") as out, contextlib.suppress(OSError):
        while True:
            out.write(b"\0" * (1 << 16))
            out.flush()


def job_checkpoints(job_dir: Path) -> Path:
    """Where the job's ranks kept their checkpoints (its plan's ``checkpoint_dir``)."""
    return Path(json.loads((job_dir / layout.PLAN_FILE).read_text())["checkpoint_dir"])


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str

    @property
    def job_dir(self) -> Path:
        jobs = job_dirs(Path(os.environ["TENTER_HOME"]) / "jobs")
        assert len(jobs) == 1, jobs
        return jobs[0]

    @property
    def summary(self) -> dict[str, object]:
        data: dict[str, object] = json.loads((self.job_dir / "summary.json").read_text())
        return data


AS_A_BACKGROUND_JOB = (signal.SIGINT, signal.SIGQUIT)
"""What a non-interactive shell ignores in a command it starts with ``&`` (as CI is started:
``setsid bash .ci/run < /dev/null &``), and so every process under it inherits."""


def tenter(
    *args: str,
    timeout: float = 180,
    max_memory: int | None = None,
    ignored_signals: tuple[signal.Signals, ...] = (),
    cwd: Path = REPO,
    python: Path | str = sys.executable,
) -> Finished:
    """Run the `tenter` CLI in a subprocess, as a user would, in ``cwd``; ``max_memory``: the
    bytes of address space it may take (a runaway then fails, instead of swapping the machine);
    ``ignored_signals``: set to SIG_IGN in it, as by the shell that started it; ``python``: the
    interpreter whose tenter runs (another venv's: its ranks run there too)."""

    def start() -> None:
        if max_memory:
            resource.setrlimit(resource.RLIMIT_AS, (max_memory, max_memory))
        for sig in ignored_signals:
            signal.signal(sig, signal.SIG_IGN)

    proc = subprocess.run(
        [python, "-m", "tenter", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        preexec_fn=start,
    )
    return Finished(proc.returncode, proc.stdout, proc.stderr)


def assert_golden(path: Path, text: str) -> None:
    """``text`` is the golden file's; ``TENTER_UPDATE_GOLDEN=1`` rewrites the file instead (then
    review the diff: it is what users will see change)."""
    if os.environ.get("TENTER_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


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
    """No process holds the port (a socket of a closed connection in TIME_WAIT does not count:
    SO_REUSEADDR lets a server bind over it, as every server here does)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((addr, port))
        except OSError:
            return False
    return True


ISOLATED_HOSTS = ipaddress.IPv4Network("198.18.0.0/15")


def processes_in_network_namespaces(inodes: set[int]) -> list[psutil.Process]:
    """The processes in the network namespaces of these inodes."""
    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(OSError):
            if os.stat(f"/proc/{proc.pid}/ns/net").st_ino in inodes:
                found.append(proc)
    return found


def assert_network_gone(job_dir: Path) -> None:
    """The job's isolated hosts (network.json) left nothing: no namespace holder and no
    process of the job in their namespaces, so the kernel freed them (and their links, the
    bridge and the ports bound there); nothing of theirs in this machine's own network.

    A namespace lives while a process is in it, and every process tenter puts there is a
    holder or carries the job's id. The namespaces' inodes alone cannot tell: the kernel
    reuses a freed one's inode, perhaps for another job's namespace by then."""
    record = json.loads((job_dir / "network.json").read_text())
    holders = [record["switch"], *record["hosts"].values()]
    for holder in holders:
        pid, _, started = holder["identity"].partition("@")
        with contextlib.suppress(psutil.NoSuchProcess):
            assert str(psutil.Process(int(pid)).create_time()) != started
    inside = {p.pid for p in processes_in_network_namespaces({h["netns"] for h in holders})}
    assert [p.cmdline() for p in job_processes(job_dir.name) if p.pid in inside] == []
    addresses = subprocess.run(
        ["ip", "-o", "-4", "addr"], capture_output=True, text=True, timeout=60
    )
    assert "198.18." not in addresses.stdout


def assert_nothing_left(job_dir: Path) -> None:
    """No process of the job, no port it bound, no temp file or shared memory it made; on
    isolated hosts, no namespace or link."""
    job_id = job_dir.name
    assert job_processes(job_id) == []
    assert own_children() == []
    # tenter's shm backend names its segments after the job (tenter.comm.shm.segment_name).
    assert list(Path("/dev/shm").glob(f"*{job_id}*")) == []
    isolated = (job_dir / "network.json").exists()
    if isolated:
        assert_network_gone(job_dir)
    summary = json.loads((job_dir / "summary.json").read_text())
    host, port = summary["rdzv_endpoint"].rsplit(":", 1)
    # An isolated host's ports were in its network namespace, gone as checked above.
    assert isolated or port_is_free(host, int(port))
    for log in (job_dir / "logs").glob("rank-*.stdout"):
        for line in log.read_text().splitlines():
            if line.startswith("MASTER="):
                addr, master_port = line.removeprefix("MASTER=").rsplit(":", 1)
                in_namespace = ipaddress.ip_address(addr) in ISOLATED_HOSTS
                assert in_namespace or port_is_free(addr, int(master_port))
    assert list(Path(os.environ["TMPDIR"]).iterdir()) == []
    assert not (job_dir / layout.SPARES_DIR).exists()  # the warm spares' temporary files


WAIT_S = 180.0
"""The longest any test waits for a line of output or for a process to end (a job of
several hosts takes about 30 s to start on a loaded 2-core machine)."""
LOG_TAIL_LINES = 40
"""Lines of each of a job's logs that a failed wait shows, besides its console output."""


class OutputReader:
    """The lines a process writes to a pipe, read by a thread of their own: a read on the
    pipe itself cannot time out, and a wait for a line must."""

    def __init__(self, stream: IO[str]) -> None:
        self.lines: list[str] = []
        """The lines taken so far, in order."""
        self._queue: queue.Queue[str | None] = queue.Queue()  # None: the end of the output
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: IO[str]) -> None:
        try:
            for line in stream:
                self._queue.put(line)
        finally:
            stream.close()
            self._queue.put(None)

    def next_line(self, deadline: float) -> str | None:
        """The next line; None at the end of the output. Raises TimeoutError at ``deadline``
        (``time.monotonic()``) if no line came."""
        try:
            line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            raise TimeoutError from None
        if line is None:
            self._queue.put(None)  # the end stays the end
        else:
            self.lines.append(line)
        return line

    def wait_for(self, *texts: str, count: int = 1, timeout: float = WAIT_S) -> None:
        """Take lines until every text has appeared in ``count`` of them; TimeoutError after
        ``timeout`` seconds, EOFError if the output ends first."""
        deadline = time.monotonic() + timeout
        seen = dict.fromkeys(texts, 0)
        while not all(n >= count for n in seen.values()):
            line = self.next_line(deadline)
            if line is None:
                raise EOFError
            for text in seen:
                seen[text] += text in line

    def read_all(self, timeout: float = WAIT_S) -> str:
        """Every line to the end of the output (TimeoutError after ``timeout`` seconds)."""
        deadline = time.monotonic() + timeout
        while self.next_line(deadline) is not None:
            pass
        return "".join(self.lines)


def stop_process(proc: subprocess.Popen[Any], grace: float = 30.0) -> None:
    """SIGINT (as Ctrl-C: tenter stops its job), then SIGKILL after ``grace`` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=grace)


def _tails(folder: Path) -> str:
    """The last lines of each file in ``folder``, for a report."""
    parts = []
    for path in sorted(p for p in folder.glob("*") if p.is_file()):
        lines = path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        parts.append(f"--- {path.name} (last {len(lines)} lines) ---\n" + "\n".join(lines))
    return "\n".join(parts)


class Background:
    """``tenter ARGS`` in the background, as a user's shell would run it; its merged output is
    read line by line until what a test waits for appears.

    Every wait has a deadline. One that fails stops the job and says why with the console
    output, the job directory (kept, as pytest keeps its tmp_path) and the tails of the
    job's logs: enough to find the cause of a rare failure from the CI log alone."""

    def __init__(self, *args: str, home: Path | None = None) -> None:
        self.home = home or Path(os.environ["TENTER_HOME"])
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tenter", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
        )
        assert self.proc.stdout is not None
        self.output = OutputReader(self.proc.stdout)

    @property
    def lines(self) -> list[str]:
        return self.output.lines

    def wait_for(self, *texts: str, count: int = 1, timeout: float = WAIT_S) -> None:
        """Read output until every text has appeared in ``count`` lines."""
        try:
            self.output.wait_for(*texts, count=count, timeout=timeout)
        except TimeoutError:
            self.fail(f"tenter did not print {texts} ({count}x) within {timeout:.0f} s")
        except EOFError:
            self.fail(
                f"tenter ended (status {self.proc.wait(timeout=WAIT_S)}) before printing {texts}"
            )

    def finish(self, timeout: float = WAIT_S) -> str:
        """Wait for the end; all of the output."""
        try:
            self.proc.wait(timeout=timeout)
            return self.output.read_all(timeout=WAIT_S)
        except (subprocess.TimeoutExpired, TimeoutError):
            self.fail(f"tenter did not end within {timeout:.0f} s")

    def kill(self) -> str:
        """SIGKILL the launcher (no cleanup of its own); all of its output."""
        self.proc.kill()
        self.proc.wait(timeout=WAIT_S)
        return self.output.read_all(timeout=WAIT_S)

    def fail(self, why: str) -> NoReturn:
        """Stop the job and fail the test, with all there is to know about the job."""
        stop_process(self.proc)
        with contextlib.suppress(TimeoutError):
            self.output.read_all(timeout=10)
        report = [why, "--- console output ---", "".join(self.lines)]
        jobs = job_dirs(self.home / "jobs")
        for job_dir in jobs:
            report += [f"--- job directory (kept): {job_dir} ---", _tails(job_dir / "logs")]
        raise AssertionError("\n".join(report))

    @property
    def job_dir(self) -> Path:
        (job_dir,) = job_dirs(self.home / "jobs")
        return job_dir
