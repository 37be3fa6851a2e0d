"""The table, the per-iteration statistics and the JSON file, as nccl-tests writes them."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torch

from tenter.perf import harness, report, results_json
from tenter.perf.options import PerfOptions
from tenter.perf.parse import parse_log
from tenter.perf.report import DeviceInfo, Half, IterStats, MemoryUse, Row
from tenter.perf.timing import time_calls


def test_iter_stats_follow_nccl_tests_compute_iter_stats() -> None:
    # Two ranks; the iteration time is the slower rank's; -K 1 drops the first from stats.
    stats = IterStats(per_process_us=[[50.0, 1.0, 3.0, 2.0], [9.0, 4.0, 1.0, 2.0]], skipped=1)
    assert stats.times_us == [50.0, 4.0, 3.0, 2.0]
    summary = stats.stats
    assert (summary["min_us"], summary["max_us"], summary["p50_us"]) == (2.0, 4.0, 3.0)
    assert summary["avg_us"] == pytest.approx(3.0)
    assert summary["stdev_us"] == pytest.approx(statistics.pstdev([4.0, 3.0, 2.0]))
    assert summary["cv_pct"] == pytest.approx(summary["stdev_us"] / 3.0 * 100)


def test_percentiles_are_nearest_rank_as_nccl_tests() -> None:
    stats = IterStats(per_process_us=[[float(i) for i in range(1, 21)]], skipped=0)
    # percentileIndex(20, 95) = 18, (20, 99) = 19: with few samples p99 is the max.
    assert stats.stats["p95_us"] == 19.0 and stats.stats["p99_us"] == 20.0


def _row(per_iter: IterStats | None = None, stamp: str | None = None) -> Row:
    half = Half(12.5, 0.66, 0.99, 0, 0, per_iter)
    return Row(8192, 2048, "float", "sum", -1, half, Half(11.0, 0.7, 1.1, None), stamp)


def test_per_iteration_and_timestamp_columns_parse_back() -> None:
    opts = PerfOptions(
        "all_reduce", per_iter_timing=True, report_timestamps=True, report_cputime=True
    )
    stats = IterStats(per_process_us=[[12.0, 13.0]], skipped=0)
    row = _row(stats, "2026-01-02 03:04:05")
    text = "\n".join([*report.header(opts), report.row_line(row)])
    assert "cputime" in report.header(opts)[2] and report.header(opts)[2].endswith("timestamp")
    (parsed,) = parse_log(text).rows
    assert parsed.out_of_place is not None and parsed.in_place is not None
    assert (parsed.out_of_place.time_us, parsed.in_place.busbw) == (12.5, 1.1)
    assert parsed.in_place.wrong == "N/A"
    assert report.row_line(row).endswith("  2026-01-02 03:04:05")


def test_out_of_bounds_sums_the_ranks_that_saw_wrong_values() -> None:
    bad = Half(1.0, 1.0, 1.0, wrong=5, errors=2)
    row = Row(8, 2, "float", "sum", -1, bad, bad)
    assert report.out_of_bounds([row, row]) == 8
    assert report.footer([row], "all_reduce_perf")[0] == "# Out of bounds values : 4 FAILED"


def test_memory_line_is_nccl_tests_mem_info() -> None:
    use = MemoryUse(initialization=3 << 29, user_allocated=5 << 20, collective=1000)
    assert report.memory_line(use, "cuda") == (
        "# GPU memory usage     : Initialization 1.50 GB | User-Allocated 5.00 MB | "
        "Collective 1000 B | Total  1.50 GB"
    )


def test_json_document_round_trips_through_the_reader() -> None:
    opts = PerfOptions("all_reduce", minbytes=8192, maxbytes=8192, per_iter_timing=True)
    device = DeviceInfo(0, 7, "algo-1", 0, "cpu", "CPU x86_64", "vm", 1 << 30)
    info = results_json.RunInfo(["all_reduce_perf"], {"A": "1"}, 0, "t0", "t1", [device], [""])
    stats = IterStats(per_process_us=[[12.0, 13.0]], skipped=0)
    doc = json.loads(results_json.dumps(results_json.document(opts, info, [_row(stats)])))
    record = doc["results"][0]
    assert record["root"] == "    -1" and record["out_of_place"]["nwrong"] == 0.0
    assert record["in_place"]["nwrong"] is None and "in_place_per_iter" not in record
    assert "per_process_max_times_us" not in record["out_of_place_per_iter"]  # one rank
    assert doc["config"]["devices"][0]["hostname"] == "algo-1" and doc["env"] == ["A=1"]
    log = results_json.read_log(doc)
    assert [(r.size, r.root, r.in_place.busbw if r.in_place else None) for r in log.rows] == [
        (8192, -1, 1.1)
    ]


def test_json_writes_nan_as_nccl_tests_does() -> None:
    assert results_json.dumps({"t": float("nan"), "l": [1.5]}) == '{"t":"nan","l":[1.5]}'


@pytest.mark.parametrize("blocking", [0, 1, 2, 3])
def test_time_calls_times_each_iteration_of_m_calls(blocking: int) -> None:
    calls: list[str] = []
    opts = PerfOptions("all_reduce", iters=4, agg_iters=3, blocking=blocking, per_iter_timing=True)
    timed = time_calls(
        lambda: calls.append("call"),
        opts,
        torch.device("cpu"),
        sync=lambda: calls.append("sync"),
        barrier=lambda: calls.append("barrier"),
    )
    assert calls.count("call") == 12
    expected_barriers = {0: 0, 1: 12, 2: 0, 3: 4}[blocking]
    assert calls.count("barrier") == expected_barriers
    assert calls.count("sync") == (12 if blocking else 0) + 1  # and once at the end
    assert timed.per_iter is not None and len(timed.per_iter) == 4
    assert all(t >= 0 for t in timed.per_iter) and timed.seconds >= 0


def test_avg_on_gloo_needs_torch_2_8(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch, "__version__", "2.7.1")
    assert harness.unsupported("gloo", "float", "avg") == (
        "gloo averages (ReduceOp.AVG) from torch 2.8 on, and this is torch 2.7.1; upgrade "
        "torch, or use -o sum"
    )
    assert harness.unsupported("nccl", "float", "avg") is None
    monkeypatch.setattr(torch, "__version__", "2.8.0")
    assert harness.unsupported("gloo", "float", "avg") is None


@pytest.mark.parametrize(
    "backend,type_name,op,runs",
    [
        ("gloo", "uint32", None, False),
        ("nccl", "uint64", "sum", False),
        ("mpi", "uint32", "sum", True),
        ("gloo", "float", "mulsum", False),
        ("nccl", "half", "mulsum", True),
        ("nccl", "bfloat16", "mulsum", False),
        ("nccl", "f8e4m3", "avg", False),
        ("nccl", "f8e5m2", "max", True),
        ("nccl", "bfloat16", "avg", True),
        ("nccl", "int32", "mulsum", False),
        ("gloo", "int8", "avg", False),
    ],
)
def test_unsupported_names_what_the_backend_cannot_run(
    backend: str, type_name: str, op: str | None, runs: bool
) -> None:
    assert (harness.unsupported(backend, type_name, op) is None) == runs


@pytest.mark.parametrize(
    "min_busbw,line_end,okay",
    [(None, ": 1.045", "unchecked"), (1.1, ": 1.045 OK", "true"), (1.2, ": 1.045 FAILED", "false")],
)
def test_min_bw_gate_passes_at_90_percent_as_nccl_tests(
    min_busbw: float | None, line_end: str, okay: str
) -> None:
    rows = [_row()]  # busbw 0.99 and 1.1: average 1.045, which is 95% of 1.1
    assert report.footer(rows, "all_reduce_perf", min_busbw)[1].endswith(line_end)
    info = results_json.RunInfo(["p"], {}, 0, "t0", "t1", [], [""], min_busbw)
    doc = results_json.document(PerfOptions("all_reduce"), info, rows)
    assert doc["average_bus_bandwidth"]["okay"] == okay


def test_results_file_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    names = []
    for _ in range(3):
        opened = results_json.open_exclusive(str(path))
        assert opened is not None
        opened[0].close()
        names.append(opened[1])
    assert names == [str(path), f"{path}.0", f"{path}.1"]
    assert results_json.open_exclusive(str(tmp_path / "missing" / "r.json")) is None
