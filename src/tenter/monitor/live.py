"""The launcher's live view of a running job: one row per rank, the job's progress and ETA.

Every ``interval_s`` :meth:`LiveView.poll` reads each rank's progress
(:mod:`tenter.jobdir.progress`: what it reported with ``tenter.report``, else the DDP steps
tenter counted on it), samples the ranks' processes (CPU, resident memory; GPU utilisation
and memory through NVML when there are GPUs) and appends one line per rank to
``<job_dir>/metrics.jsonl``. On a terminal it draws a table below the streaming logs (rich's
``Live``, which takes over stdout and stderr so that the logs print above it); otherwise it
prints a one-line status every ``status_every_s`` seconds, and one at the end. With
``metrics_port`` it also serves the samples to Prometheus
(:mod:`tenter.monitor.prometheus`), on the loopback interface unless told otherwise.

Processes are found among the launcher's descendants (the local and mpi backends start the
workers there): a rank's worker is the process whose environment holds this job's
``TENTER_JOB_ID`` and a ``RANK``; its children (data loader workers) count towards its CPU and
memory. Ranks on other machines (Slurm, Kubernetes) show what they reported, without CPU,
memory or GPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
from rich.console import Console
from rich.live import Live

from tenter.contract.plan import Plan
from tenter.jobdir import layout, private
from tenter.jobdir.layout import METRICS_FILE, METRICS_TOKEN_FILE
from tenter.jobdir.line_files import JsonlFollower
from tenter.jobdir.progress import ProgressReader, RankProgress
from tenter.launch.shared.console import say
from tenter.monitor.goodput_report import GoodputFeed
from tenter.monitor.gpu import GpuUsage, Nvml, open_nvml
from tenter.monitor.snapshot import RankStatus, Snapshot, render, status_line

if TYPE_CHECKING:
    from tenter.monitor.prometheus import MetricsServer

WINDOW_S = 10.0
"""Rates (samples/s, step time) are averaged over the last this many seconds of records."""


@dataclass
class _Usage:
    cpu_percent: float = 0.0
    rss_bytes: int = 0
    pids: list[int] = field(default_factory=list)
    alive: bool = True


class _WorkerProcesses:
    """The job's worker processes among the launcher's descendants, by rank."""

    def __init__(self, job_id: str) -> None:
        self._job_id = job_id
        self._known: dict[int, tuple[int | None, psutil.Process]] = {}
        """pid -> (the rank it belongs to or None, the Process: cpu_percent needs the same
        object from one call to the next)."""
        self.seen: set[int] = set()
        """Ranks that had a process at some point."""

    def _rank_of(self, proc: psutil.Process) -> int | None:
        try:
            env = proc.environ()
        except psutil.Error:
            return None
        if env.get("TENTER_JOB_ID") != self._job_id:
            return None
        if "RANK" in env:
            return int(env["RANK"])
        # A warm worker (tenter.launch.agent.spares) keeps the environment it started with, without
        # its rank's variables, in /proc; once it became a rank, its stdout is the rank's log.
        try:
            stdout = os.path.basename(os.readlink(f"/proc/{proc.pid}/fd/1"))
        except OSError:
            return None
        return layout.rank_of(stdout) if stdout.endswith(layout.STDOUT_SUFFIX) else None

    def sample(self) -> dict[int, _Usage]:
        try:
            procs = psutil.Process().children(recursive=True)
        except psutil.Error:
            return {}
        current = {p.pid for p in procs}
        for pid in list(self._known):
            if pid not in current:
                del self._known[pid]
        for proc in procs:
            if proc.pid not in self._known or self._known[proc.pid][0] is None:
                rank = self._rank_of(proc)
                self._known[proc.pid] = (rank, proc)
                if rank is not None:
                    proc.cpu_percent()  # the first call starts the measurement
        usage: dict[int, _Usage] = {}
        for rank, proc in self._known.values():
            if rank is None:
                continue
            self.seen.add(rank)
            with contextlib.suppress(psutil.Error):
                one = usage.setdefault(rank, _Usage())
                one.cpu_percent += proc.cpu_percent()
                one.rss_bytes += proc.memory_info().rss
                one.pids.append(proc.pid)
        return usage


class LiveView:
    """Shows and records a running job; ``start()`` once it runs, ``stop()`` when it ended."""

    def __init__(
        self,
        plan: Plan,
        *,
        live: bool | None = None,
        interval_s: float = 1.0,
        status_every_s: float = 30.0,
        metrics_port: int | None = None,
        metrics_addr: str = "127.0.0.1",
        console: Console | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``live``: draw the table (default: when stdout and stderr are terminals), else
        print status lines. ``metrics_port``: serve Prometheus metrics there (0: any free
        port, see :attr:`metrics_url`)."""
        self.plan = plan
        self.console = console or Console(stderr=True, highlight=False, soft_wrap=True)
        self.live = live if live is not None else sys.stdout.isatty() and sys.stderr.isatty()
        self.interval_s = interval_s
        self.status_every_s = status_every_s
        self._clock = clock
        self._started = clock()
        self._last_status = self._started
        self._progress = ProgressReader(plan.job_dir, window_s=WINDOW_S)
        # Followed, not read again each refresh: a long job's restarts grow the index.
        self._index = JsonlFollower(layout.logs_dir(plan.job_dir) / layout.INDEX_FILE)
        self._entries: dict[int, dict[str, Any]] = {}
        """Each rank's latest log entry (a restart's entry replaces the last)."""
        self._planned = {r.rank: h.name for h in plan.hosts for r in h.ranks}
        self._goodput = GoodputFeed(Path(plan.job_dir))
        self._processes = _WorkerProcesses(plan.job_id)
        self._nvml: Nvml | None = None
        self.gpu_note = ""
        self._nvml, self.gpu_note = open_nvml()
        self.latest: Snapshot | None = None
        self._lock = threading.Lock()
        """poll() runs in the view's thread and, at the end, in the caller's."""
        self._stop = threading.Event()
        self._record_failed = False
        self._thread = threading.Thread(target=self._run, name="tenter-live", daemon=True)
        self._live: Live | None = None
        self._server: MetricsServer | None = None
        if metrics_port is not None:
            from tenter.monitor.prometheus import MetricsServer

            self._server = MetricsServer(self, metrics_port, metrics_addr)

    @property
    def metrics_url(self) -> str | None:
        return self._server.url if self._server is not None else None

    def start(self) -> LiveView:
        if self.live:
            self._live = Live(
                console=self.console,
                auto_refresh=False,
                redirect_stdout=True,
                redirect_stderr=True,
            )
            self._live.start()
        if self._server is not None and self._server.token:
            token_file = Path(self.plan.job_dir) / METRICS_TOKEN_FILE
            private.write_token(token_file, self._server.token)
            say(
                f"Prometheus metrics at {self._server.url}, to requests with the header "
                f"'Authorization: Bearer <the token in {token_file}>' (prometheus: "
                "authorization.credentials_file)"
            )
        elif self._server is not None:
            say(f"Prometheus metrics at {self._server.url}")
        self._thread.start()
        return self

    def stop(self) -> None:
        """A last sample (the final reports), shown; then release the terminal and the port."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        snapshot = self.poll()
        if self._live is not None:
            self._live.update(render(snapshot), refresh=True)
            self._live.stop()
        elif snapshot.reporting:
            say(status_line(snapshot))
        if self._server is not None:
            self._server.close()
        if self._nvml is not None:
            self._nvml.close()

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            snapshot = self.poll()
            if self._live is not None:
                self._live.update(render(snapshot), refresh=True)
            elif snapshot.reporting and snapshot.time - self._last_status >= self.status_every_s:
                self._last_status = snapshot.time
                say(status_line(snapshot))

    def poll(self) -> Snapshot:
        """Sample every rank once, append the samples to metrics.jsonl and return them."""
        with self._lock:
            snapshot = self._sample()
            self._record(snapshot)
            self.latest = snapshot
        return snapshot

    def _sample(self) -> Snapshot:
        now = self._clock()
        for opened in self._index.read_new():
            self._entries[int(str(opened["rank"]))] = opened
        entries, planned = self._entries, self._planned
        usage = self._processes.sample()
        gpu: dict[int, GpuUsage] = {}
        if self._nvml is not None:
            gpu = self._nvml.usage(pid for u in usage.values() for pid in u.pids)
        progress = self._progress.read()
        ranks = []
        for rank in sorted(planned.keys() | entries.keys()):
            done = progress.get(rank, RankProgress())
            entry = entries.get(rank)
            host = str(entry["host"]) if entry else planned[rank]
            used = usage.get(rank)
            on_gpu = [gpu[p] for p in used.pids if p in gpu] if used else []
            ranks.append(
                RankStatus(
                    rank=rank,
                    host=host,
                    state=self._state(rank, entry, used, done),
                    step=done.step,
                    samples=done.samples,
                    samples_per_s=done.samples_per_s(),
                    step_time_s=done.step_time_s(),
                    loss=done.loss,
                    total_steps=done.total_steps,
                    cpu_percent=used.cpu_percent if used else None,
                    rss_bytes=used.rss_bytes if used else None,
                    gpu_util_percent=max(g.utilization_percent for g in on_gpu) if on_gpu else None,
                    gpu_memory_bytes=sum(g.memory_bytes for g in on_gpu) if on_gpu else None,
                    metrics=dict(done.metrics),
                )
            )
        snapshot = _summarise(now, now - self._started, ranks, self._nvml is not None)
        return dataclasses.replace(
            snapshot, goodput=self._goodput.ledger(), stragglers=self._goodput.stragglers()
        )

    def _state(
        self, rank: int, entry: dict[str, Any] | None, used: _Usage | None, done: RankProgress
    ) -> str:
        if entry is None and used is None:
            return "pending"
        if entry is not None and Path(layout.error_file(entry["stem"])).exists():
            return "failed"
        if used is None and rank in self._processes.seen:
            return "exited"
        if done.step is None and not done.reports:
            return "starting"
        finished = done.total_steps is not None and (done.step or 0) >= done.total_steps
        return "done" if finished else "running"

    def _record(self, snapshot: Snapshot) -> None:
        path = Path(self.plan.job_dir) / METRICS_FILE
        if not path.parent.is_dir():
            return  # the job directory is not there yet
        lines = []
        for status in snapshot.ranks:
            if status.state == "pending":
                continue
            row = {"time": snapshot.time, **asdict(status)}
            lines.append(json.dumps({k: v for k, v in row.items() if v is not None}) + "\n")
        if not lines or self._record_failed:
            return
        try:
            with open(path, "a") as fp:
                fp.write("".join(lines))
        except OSError as e:
            # A full disk (a job that filled it) must not end the view: the job's own
            # failure is what the user needs to see. Said once; nothing more is recorded.
            self._record_failed = True
            say(f"live metrics are no longer recorded: {path}: {e.strerror}")


def _summarise(now: float, elapsed: float, ranks: list[RankStatus], gpus: bool) -> Snapshot:
    alive = [r for r in ranks if r.state in ("starting", "running")]
    rates = [r.samples_per_s for r in alive if r.samples_per_s is not None]
    steps = [r.step for r in ranks if r.step is not None]
    totals = [r.total_steps for r in ranks if r.total_steps is not None]
    step_times = [r.step_time_s for r in alive if r.step_time_s is not None]
    step = min(steps) if steps else None
    total = max(totals) if totals else None
    eta = None
    if step is not None and total is not None and step_times:
        eta = max(0, total - step) * statistics.median(step_times)
    return Snapshot(
        time=now,
        elapsed_s=elapsed,
        ranks=ranks,
        samples_per_s=sum(rates) if rates else None,
        step=step,
        total_steps=total,
        eta_s=eta,
        gpus=gpus,
    )
