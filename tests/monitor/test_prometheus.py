"""The Prometheus endpoint: loopback by default, parseable, Prometheus' naming conventions."""

from __future__ import annotations

import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tenter.goodput.keeper import LedgerKeeper, record_straggler
from tenter.goodput.stragglers import Straggler
from tenter.monitor.live import LiveView
from tenter.monitor.prometheus import metric_name
from tenter.monitor.snapshot import status_line
from tests.monitor.helpers import T0, fake_job, launched_at


def test_metrics_endpoint_serves_every_rank_in_prometheus_text_format() -> None:
    view = LiveView(fake_job(), live=False, metrics_port=0, clock=lambda: T0 + 30)
    try:
        assert view.metrics_url is not None
        assert view.metrics_url.startswith("http://127.0.0.1:")
        view.poll()
        with urllib.request.urlopen(view.metrics_url, timeout=30) as response:
            text = response.read().decode()
    finally:
        view.stop()
    samples = {
        (s.name, s.labels.get("rank"), s.labels.get("state")): s
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples["tenter_rank_step", "2", None].value == 11
    assert samples["tenter_rank_step", "2", None].labels == {
        "job_id": view.plan.job_id,
        "host": "algo-2",
        "rank": "2",
    }
    assert samples["tenter_rank_samples_total", "0", None].value == 11 * 32
    assert samples["tenter_rank_step_duration_seconds", "1", None].value == 1.0
    assert samples["tenter_rank_state", "3", "running"].value == 1
    assert samples["tenter_rank_state", "3", "failed"].value == 0
    assert samples["tenter_script_lr", "0", None].value == 0.1
    assert samples["tenter_job_samples_per_second", None, None].value == 4 * 32
    assert samples["tenter_job_eta_seconds", None, None].value == 89.0


def test_metric_name_keeps_only_characters_prometheus_allows() -> None:
    assert metric_name("grad-norm/layer.1") == "tenter_script_grad_norm_layer_1"


def test_metrics_endpoint_serves_goodput_ledger_and_stragglers() -> None:
    plan = fake_job()
    job_dir = Path(plan.job_dir)
    launched_at(job_dir, T0 - 5)  # 5 s before the first step
    LedgerKeeper(job_dir).write(now=T0 + 30)
    straggler = Straggler(rank=2, host="algo-2", step=16, busy_s=0.13, others_s=0.1)
    record_straggler(plan.job_dir, straggler)
    view = LiveView(plan, live=False, metrics_port=0, clock=lambda: T0 + 30)
    try:
        assert view.metrics_url is not None
        snapshot = view.poll()
        with urllib.request.urlopen(view.metrics_url, timeout=30) as response:
            text = response.read().decode()
    finally:
        view.stop()
    samples = {
        (s.name, s.labels.get("part")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    # Each rank: 5 s to its first report, then 10 s of steps and 20 s of the step it computes.
    assert samples["tenter_job_wall_seconds", None] == 35.0
    assert samples["tenter_job_time_seconds", "startup"] == 5.0
    assert samples["tenter_job_time_seconds", "productive"] == 30.0
    assert samples["tenter_job_goodput_ratio", None] == 30.0 / 35.0
    assert samples["tenter_job_stragglers", None] == 1
    assert snapshot.stragglers == [straggler.text]
    assert "goodput 85.7 %: productive 30.0 s of 35.0 s; startup 5.0 s" in status_line(snapshot)
