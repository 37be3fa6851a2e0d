"""The live view's samples for Prometheus: ``tenter run --metrics-port 9400``.

Serves ``http://127.0.0.1:PORT/metrics`` (loopback unless an address is given: the page
names hosts and losses, and a training job has no business exposing them to the network)
while the job runs. Every series carries ``job_id``, and the per-rank ones ``host`` and
``rank`` (``job`` is left to Prometheus, which sets it to the scrape job's name):

========================================  =======  ===========================================
tenter_rank_step                          gauge    the rank's last step (reported or counted)
tenter_rank_samples_total                 counter  samples the rank reported
tenter_rank_samples_per_second            gauge    over the last 10 s of reports
tenter_rank_step_duration_seconds         gauge    over the last 10 s of steps
tenter_rank_loss                          gauge    last loss reported
tenter_rank_state                         gauge    1 for the rank's state (label ``state``)
tenter_rank_cpu_usage_ratio               gauge    CPU seconds per second (1 = one core)
tenter_rank_resident_memory_bytes         gauge    RSS of the rank's processes
tenter_rank_gpu_utilization_ratio         gauge    busy share of its GPU (NVML), 0 to 1
tenter_rank_gpu_memory_used_bytes         gauge    GPU memory the rank holds (NVML)
tenter_script_<name>                      gauge    other values passed to tenter.report
tenter_job_samples_per_second             gauge    sum over the live ranks
tenter_job_step / tenter_job_total_steps  gauge    the slowest rank's step, the last step
tenter_job_eta_seconds                    gauge    remaining steps x median step time
========================================  =======  ===========================================
"""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from tenter.deps import require
from tenter.jobdir import private

# prometheus-client is optional (``tenter[monitor]``): it is imported where it is used, so that
# this module, and check_metrics_dependency with it, load without it.
if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment
    from prometheus_client.core import Metric
    from prometheus_client.registry import Collector

    from tenter.monitor.live import LiveView
    from tenter.monitor.snapshot import RankStatus, Snapshot
else:
    Collector = object  # the base class matters to mypy only: registries call collect()

RANK_LABELS = ["job_id", "host", "rank"]
STATES = ("pending", "starting", "running", "done", "failed", "exited")


def check_metrics_dependency() -> None:
    """Raise :class:`tenter.deps.MissingDependencyError` unless ``--metrics-port`` can serve:
    prometheus-client 0.20 or later (its WSGI app and threading server, which tenter serves
    and shuts down with the job). Call it before the job starts."""
    require(
        "prometheus_client",
        "monitor",
        "tenter run --metrics-port",
        distribution="prometheus-client",
        minimum="0.20",
    )


def metric_name(name: str) -> str:
    """A script's metric name as a Prometheus name: ``tenter_script_`` + [a-zA-Z0-9_]."""
    return "tenter_script_" + re.sub(r"[^a-zA-Z0-9_]", "_", name)


class _SnapshotCollector(Collector):
    def __init__(self, view: LiveView) -> None:
        self._view = view

    def collect(self) -> Iterator[Metric]:
        snapshot = self._view.latest
        if snapshot is None:
            return
        yield from _rank_metrics(self._view.plan.job_id, snapshot)
        yield from _job_metrics(self._view.plan.job_id, snapshot)


def _gauge(name: str, doc: str, values: list[tuple[list[str], float | None]]) -> Metric:
    from prometheus_client.core import GaugeMetricFamily

    family = GaugeMetricFamily(name, doc, labels=RANK_LABELS)
    for labels, value in values:
        if value is not None:
            family.add_metric(labels, value)
    return family


def _rank_metrics(job_id: str, snapshot: Snapshot) -> Iterator[Metric]:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    def each(value: Callable[[RankStatus], float | None]) -> list[tuple[list[str], float | None]]:
        return [([job_id, r.host, str(r.rank)], value(r)) for r in snapshot.ranks]

    yield _gauge(
        "tenter_rank_step",
        "The rank's last step: reported, or counted by tenter from DDP.",
        each(lambda r: r.step),
    )
    samples = CounterMetricFamily(
        "tenter_rank_samples", "Samples the rank reported processing.", labels=RANK_LABELS
    )
    for r in snapshot.ranks:
        samples.add_metric([job_id, r.host, str(r.rank)], r.samples)
    yield samples
    yield _gauge(
        "tenter_rank_samples_per_second",
        "Samples per second over the last 10 s of the rank's reports.",
        each(lambda r: r.samples_per_s),
    )
    yield _gauge(
        "tenter_rank_step_duration_seconds",
        "Seconds per step over the last 10 s of the rank's steps.",
        each(lambda r: r.step_time_s),
    )
    yield _gauge("tenter_rank_loss", "Last loss the rank reported.", each(lambda r: r.loss))
    state = GaugeMetricFamily(
        "tenter_rank_state", "1 for the rank's current state.", labels=[*RANK_LABELS, "state"]
    )
    for r in snapshot.ranks:
        for name in STATES:
            state.add_metric([job_id, r.host, str(r.rank), name], float(r.state == name))
    yield state
    yield _gauge(
        "tenter_rank_cpu_usage_ratio",
        "CPU seconds per second used by the rank's processes (1 is one core busy).",
        each(lambda r: None if r.cpu_percent is None else r.cpu_percent / 100),
    )
    yield _gauge(
        "tenter_rank_resident_memory_bytes",
        "Resident memory of the rank's processes.",
        each(lambda r: r.rss_bytes),
    )
    yield _gauge(
        "tenter_rank_gpu_utilization_ratio",
        "Busy share of the GPU the rank runs on (NVML), 0 to 1.",
        each(lambda r: None if r.gpu_util_percent is None else r.gpu_util_percent / 100),
    )
    yield _gauge(
        "tenter_rank_gpu_memory_used_bytes",
        "GPU memory the rank's processes hold (NVML).",
        each(lambda r: r.gpu_memory_bytes),
    )
    for name in sorted({name for r in snapshot.ranks for name in r.metrics}):
        yield _gauge(
            metric_name(name),
            f"Last value of '{name}' the rank passed to tenter.report.",
            [([job_id, r.host, str(r.rank)], r.metrics.get(name)) for r in snapshot.ranks],
        )


def _job_metrics(job_id: str, snapshot: Snapshot) -> Iterator[Metric]:
    from prometheus_client.core import GaugeMetricFamily

    values = {
        "tenter_job_samples_per_second": (
            "Samples per second, all live ranks together.",
            snapshot.samples_per_s,
        ),
        "tenter_job_step": ("The slowest rank's step.", snapshot.step),
        "tenter_job_total_steps": (
            "The last step, as the script reported it.",
            snapshot.total_steps,
        ),
        "tenter_job_eta_seconds": (
            "Seconds to the last step at the median step time.",
            snapshot.eta_s,
        ),
    }
    ledger = snapshot.goodput
    if ledger is not None:
        values["tenter_job_goodput_ratio"] = ("Productive time / wall time so far.", ledger.goodput)
        values["tenter_job_wall_seconds"] = ("Wall time of the job so far.", ledger.wall_s)
        values["tenter_job_lost_steps"] = (
            "Steps computed again after a resume.",
            ledger.lost_steps,
        )
    values["tenter_job_stragglers"] = ("Ranks named stragglers so far.", len(snapshot.stragglers))
    for name, (doc, value) in values.items():
        if value is not None:
            family = GaugeMetricFamily(name, doc, labels=["job_id"])
            family.add_metric([job_id], value)
            yield family
    if ledger is not None:
        parts = GaugeMetricFamily(
            "tenter_job_time_seconds",
            "Wall time so far by the goodput ledger's part (they add up to the wall time).",
            labels=["job_id", "part"],
        )
        for part, seconds in ledger.parts.items():
            parts.add_metric([job_id, part], seconds)
        yield parts


def is_loopback(addr: str) -> bool:
    """``addr`` reaches this machine only (``localhost`` or a loopback address)."""
    try:
        return addr == "localhost" or ipaddress.ip_address(addr).is_loopback
    except ValueError:  # a host name: whatever it resolves to, beyond loopback
        return False


def _with_token(app: WSGIApplication, token: str) -> WSGIApplication:
    """``app`` for the requests that carry ``token``; any other gets 403 and nothing else."""

    def guarded(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if private.authorized(environ.get("HTTP_AUTHORIZATION"), token):
            return app(environ, start_response)
        start_response("403 Forbidden", [("Content-Length", "0")])
        return [b""]

    return guarded


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: a scrape every few seconds would fill the console."""


class MetricsServer:
    """An HTTP server on a thread of its own, serving the view's latest snapshot; beyond
    loopback, to the requests that carry :attr:`token` only (``Authorization: Bearer``)."""

    def __init__(self, view: LiveView, port: int, addr: str = "127.0.0.1") -> None:
        check_metrics_dependency()
        from prometheus_client import make_wsgi_app
        from prometheus_client.core import CollectorRegistry
        from prometheus_client.exposition import ThreadingWSGIServer

        registry = CollectorRegistry(auto_describe=True)
        registry.register(_SnapshotCollector(view))
        self.token = "" if is_loopback(addr) else private.new_token()
        app = make_wsgi_app(registry)
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        server_class = type("Server", (ThreadingWSGIServer,), {"address_family": family})
        guarded = _with_token(app, self.token) if self.token else app
        self._server: WSGIServer = make_server(addr, port, guarded, server_class, _QuietHandler)
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="tenter-metrics", daemon=True
        )
        self._thread.start()
        host = f"[{addr}]" if ":" in addr else addr
        self.url = f"http://{host}:{self._server.server_port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
