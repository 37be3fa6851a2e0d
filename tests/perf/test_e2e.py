"""End to end on gloo: real multi-process jobs, every collective, several types and ops.

One torchrun launch per world size runs the whole matrix (scripts/matrix.py), so the
tests stay fast; the `tenter perf` command and the broken-collective run are launched
as users launch them.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from tenter.perf.harness import unsupported
from tenter.perf.parse import parse_log
from tests.conftest import REPO, assert_nothing_left, tenter

HERE = Path(__file__).parent
SMALL = "-b 8 -e 4K -f 8 -n 2 -w 1 -c 1"
CONFIGS = [
    f"all_reduce {SMALL}",
    f"all_gather {SMALL}",
    f"reduce_scatter {SMALL}",
    f"broadcast {SMALL} -r 1",
    f"reduce {SMALL} -r 1",
    f"alltoall {SMALL}",
    f"sendrecv {SMALL}",
    "all_reduce -b 64 -e 64 -n 1 -w 0 -d all -o all",
    "reduce_scatter -b 256 -e 1K -f 4 -n 1 -w 0 -d bfloat16 -o all",
    "reduce -b 1K -e 1K -n 1 -w 0 -d int8 -o prod -r 1",
    "all_gather -b 1K -e 1K -n 1 -w 0 -d all",
    "alltoall -b 1K -e 1K -n 1 -w 0 -d half",
    "broadcast -b 1K -e 1K -n 1 -w 0 -d uint8",
    "sendrecv -b 1K -e 1K -n 1 -w 0 -d double",
    "all_reduce -b 1K -e 3K -i 1K -n 1 -w 0 -a 3 -z 1 -d int32 -o max",
    # nccl-tests' other flags: aggregation, cycles, blocking modes, per-iteration timing...
    "all_reduce -b 0.5K -e 1K -f 2 -n 3 -w 0 -m 2 -N 2 -z 3 -I 1 -K 1 -C 1 -S 1 -M 1 -u 1",
    "reduce_scatter -b 1K -e 1K -n 2 -w 0 -z 2 -c 3 -f 1 -T 60 -p 1 -I 1",
]
GOOD = range(len(CONFIGS))
TOO_BIG = len(CONFIGS)
BAD_ROOT = TOO_BIG + 1
WITH_JSON = TOO_BIG + 2
UNSUPPORTED = TOO_BIG + 3
NO_UINT32 = TOO_BIG + 4
NO_MULSUM = TOO_BIG + 5


def torchrun(nproc: int, *args: str) -> subprocess.CompletedProcess[str]:
    # torchrun leaves its log directory (torchelastic_*) in its TMPDIR: one that goes with it.
    with tempfile.TemporaryDirectory(prefix="torchrun-") as tmp:
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={nproc}",
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=REPO,
            env={**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": tmp},
        )


@dataclass(frozen=True)
class Matrix:
    nranks: int
    out: Path
    results: dict[int, tuple[str, dict[str, object]]]
    """Config index -> (rank 0's output, {"exit": status} or {"error": PerfError message})."""


def run_matrix(nranks: int, out: Path) -> Matrix:
    configs = [
        *CONFIGS,
        "all_reduce -b 8 -e 1000G -f 2",
        "broadcast -b 8 -e 8 -r 7",
        f"all_gather -b 64 -e 256 -f 2 -n 3 -I 1 -J {out / 'ag.json'}",
        "all_reduce -b 8 -e 8 -o avg -d int8",
        "all_gather -b 8 -e 8 -d uint32",
        "all_reduce -b 8 -e 8 -o mulsum",
    ]
    proc = torchrun(nranks, str(HERE / "scripts" / "matrix.py"), str(out), *configs)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = {
        i: ((out / f"{i}.txt").read_text(), json.loads((out / f"{i}.json").read_text()))
        for i in range(len(configs))
    }
    return Matrix(nranks, out, results)


@pytest.fixture(scope="module", params=[2, 4], ids=["2ranks", "4ranks"])
def matrix(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Matrix:
    nranks: int = request.param
    return run_matrix(nranks, tmp_path_factory.mktemp(f"perf{nranks}"))


NCCL_TYPES = (
    *("int8", "uint8", "int32", "uint32", "int64", "uint64"),
    *("half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"),
)
NCCL_OPS = ("sum", "prod", "max", "min", "avg", "mulsum")


def gloo_runs(type_name: str, op: str | None) -> bool:
    """What gloo can run: no uint32/uint64/fp8 tensors, no PREMUL_SUM, no integer average."""
    if type_name in ("uint32", "uint64", "f8e4m3", "f8e5m2") or op == "mulsum":
        return False
    return not (op == "avg" and type_name.startswith(("int", "uint")))


def expected_rows(config: str) -> int:
    args = config.split()
    sizes = {"-b 8 -e 4K -f 8": 4, "-b 256 -e 1K -f 4": 2, "-b 1K -e 3K -i 1K": 3}
    n = next((v for k, v in sizes.items() if k in config), 1)
    n = 4 if "-b 0.5K -e 1K -f 2" in config and "-N 2" in config else n
    types = (
        NCCL_TYPES
        if "-d all" in config
        else (args[args.index("-d") + 1],)
        if "-d" in args
        else ("float",)
    )
    reduces = args[0] in ("all_reduce", "reduce_scatter", "reduce")
    ops: tuple[str | None, ...] = (None,)
    if reduces:
        ops = (
            NCCL_OPS
            if "-o all" in config
            else (args[args.index("-o") + 1],)
            if "-o" in args
            else ("sum",)
        )
    return n * sum(gloo_runs(t, o) for t in types for o in ops)


@pytest.mark.slow
@pytest.mark.parametrize(
    "index", GOOD, ids=[c.split(" -")[0] + f"-{i}" for i, c in enumerate(CONFIGS)]
)
def test_every_collective_runs_with_zero_wrong(matrix: Matrix, index: int) -> None:
    nranks, results = matrix.nranks, matrix.results
    text, result = results[index]
    assert result == {"exit": 0}, text
    log = parse_log(text)
    config = CONFIGS[index]
    assert len(log.rows) == expected_rows(config)
    name = config.split()[0]
    for row in log.rows:
        assert row.out_of_place is not None and row.out_of_place.wrong == "0", text
        assert row.in_place is not None
        unchecked = name in ("alltoall", "sendrecv")
        assert row.in_place.wrong == ("N/A" if unchecked else "0"), text
        rooted = name in ("broadcast", "reduce")
        assert row.root == ((1 if "-r 1" in config else 0) if rooted else -1)
        assert (row.redop == "none") == (name not in ("all_reduce", "reduce_scatter", "reduce"))
    assert "# Using devices" in text and text.count("#  Rank ") == nranks
    assert "# Out of bounds values : 0 OK" in text
    # Rows are printed to 0.01 GB/s; the footer's mean uses the unrounded values.
    assert log.reported_avg_busbw == pytest.approx(log.avg_busbw, abs=0.005)


@pytest.mark.slow
def test_sizes_and_counts_follow_nccl_tests(
    matrix: Matrix,
) -> None:
    nranks, results = matrix.nranks, matrix.results
    gather = parse_log(results[1][0])  # all_gather -b 8 -e 4K -f 8, float
    per_rank = [8 // 4 // nranks, 64 // 4 // nranks, 512 // 4 // nranks, 4096 // 4 // nranks]
    assert [r.count for r in gather.rows] == per_rank
    assert [r.size for r in gather.rows] == [c * nranks * 4 for c in per_rank]
    linear = parse_log(results[14][0])
    assert [r.size for r in linear.rows] == [1024, 2048, 3072]
    types = [r.type for r in parse_log(results[7][0]).rows]
    # -d all runs nccl-tests' order; gloo has no uint32/uint64 ("# Skipping" lines).
    assert list(dict.fromkeys(types)) == [
        "int8",
        "uint8",
        "int32",
        "int64",
        "half",
        "float",
        "double",
        "bfloat16",
    ]
    assert "# Skipping uint32 sum: torch.distributed's gloo backend has no uint32" in results[7][0]


@pytest.mark.slow
def test_buffers_that_cannot_fit_are_refused_before_allocating(
    matrix: Matrix,
) -> None:
    results = matrix.results
    text, result = results[TOO_BIG]
    assert text == ""
    assert re.match(
        r"-e/--maxbytes 1000G needs [\d.]+ GiB for \d rank\(s\) on \S+ .* but only [\d.]+ GiB "
        r"is free; lower -e/--maxbytes or pass -c 0$",
        str(result["error"]),
    ), result


@pytest.mark.slow
def test_root_outside_the_job_is_refused(
    matrix: Matrix,
) -> None:
    nranks, results = matrix.nranks, matrix.results
    assert results[BAD_ROOT][1] == {
        "error": f"-r/--root 7 is not a rank of this job ({nranks} ranks); "
        f"pass -r between 0 and {nranks - 1}"
    }


@pytest.mark.slow
def test_op_the_backend_cannot_run_is_refused(matrix: Matrix) -> None:
    assert matrix.results[UNSUPPORTED][1] == {
        "error": "-o/--op avg with -d/--datatype int8: gloo averages by true division, which "
        "integer tensors cannot hold; choose a floating-point -d or another -o"
    }
    assert matrix.results[NO_UINT32][1] == {
        "error": "-d/--datatype uint32: torch.distributed's gloo backend has no uint32 "
        "tensors; -d int32 moves as many bytes"
    }
    assert matrix.results[NO_MULSUM][1] == {
        "error": "-o/--op mulsum with -d/--datatype float: mulsum is NCCL's pre-multiplied "
        "sum (ReduceOp.PREMUL_SUM), which only torch's nccl backend runs: pass --device cuda"
    }


@pytest.mark.slow
def test_json_is_nccl_tests_format_as_its_analyzer_reads_it(matrix: Matrix) -> None:
    nranks, text = matrix.nranks, matrix.results[WITH_JSON][0]
    path = matrix.out / "ag.json"
    assert text.startswith(f"# Writing JSON output to {path}\n")
    doc = json.loads(path.read_text())
    log = parse_log(text)
    # What nccl-tests' tools/analyze_perf_json.py reads, read the way it reads it.
    report = analyze_perf_json(doc)
    assert report["iterations"] == 3 and report["aggregated_iterations"] == 1
    assert report["sizes"] == [r.size for r in log.rows]
    for placement in ("out_of_place_per_iter", "in_place_per_iter"):
        assert report[placement]["consistent"], placement
        assert report[placement]["process_rows"] == (nranks if nranks > 1 else 0)
        for stats in report[placement]["stats"]:
            assert 0 < stats["min_us"] <= stats["avg_us"] <= stats["max_us"]
            assert stats["min_us"] <= stats["p99_us"] <= stats["max_us"]
            assert stats["cv_pct"] >= 0 and stats["spike"] >= 1
    assert report["node_groups"] == [list(range(nranks))]  # one machine: one hostname
    # The rest of the file, as common.cu and util.cu write it.
    assert list(doc) == [
        "version",
        "start_time",
        "args",
        "env",
        "nccl_version",
        "config",
        "results",
        "out_of_bounds",
        "average_bus_bandwidth",
        "errors",
        "end_time",
    ]
    assert doc["version"] == 3 and isinstance(doc["nccl_version"], int)
    for stamp in (doc["start_time"], doc["end_time"]):
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", stamp)
    assert doc["args"][0] == "all_gather_perf" and "-J" in doc["args"]
    # The environment of the rank that wrote it (rank 0), as nccl-tests records its own.
    assert all(isinstance(e, str) and "=" in e for e in doc["env"])
    assert {"RANK=0", f"WORLD_SIZE={nranks}"} <= set(doc["env"])
    assert doc["config"]["step_factor"] == 2 and "step_bytes" not in doc["config"]
    assert doc["config"]["blocking_collectives"] == "false"
    assert doc["config"]["per_iter_timing"] == "true"
    first = doc["results"][0]
    assert first["root"] == "    -1" and first["redop"] == "none"
    assert first["out_of_place"]["nwrong"] == 0.0 and isinstance(first["in_place"]["time"], float)
    assert first["actual_iterations"] == 3 and first["experiment_name"] == ""
    assert doc["out_of_bounds"] == {"count": 0, "okay": "true"}
    halves = [h["bus_bw"] for r in doc["results"] for h in (r["out_of_place"], r["in_place"])]
    assert doc["average_bus_bandwidth"]["bandwidth"] == pytest.approx(sum(halves) / len(halves))
    assert doc["average_bus_bandwidth"]["okay"] == "unchecked"


def analyze_perf_json(data: dict[str, Any]) -> dict[str, Any]:
    """The fields nccl-tests' tools/analyze_perf_json.py reads, read as it reads them
    (dict lookups where it indexes, .get where it tolerates absence)."""
    cfg = data.get("config", {})
    report: dict[str, Any] = {
        "iterations": cfg.get("iterations"),
        "aggregated_iterations": cfg.get("aggregated_iterations", 1),
        "skip": cfg.get("per_iter_skip", 0),
        "sizes": [r["size"] for r in data["results"]],
    }
    for key in ("out_of_place_per_iter", "in_place_per_iter"):
        stats, consistent, rows = [], True, 0
        for r in data["results"]:
            per_iter = r.get(key, {})
            stats.append(
                {
                    "avg_us": per_iter["avg_us"],
                    "min_us": per_iter["min_us"],
                    "max_us": per_iter["max_us"],
                    "p99_us": per_iter["p99_us"],
                    "cv_pct": per_iter["cv_pct"],
                    "spike": per_iter["max_us"] / per_iter["avg_us"],
                }
            )
            process_times = per_iter.get("per_process_max_times_us", [])
            rows = len(process_times)
            times = per_iter.get("times_us", [])
            if process_times and times:
                n = min(len(t) for t in process_times)
                expected = [max(t[i] for t in process_times) for i in range(n)]
                consistent &= len(times) == len(expected) and all(
                    abs(a - b) < 0.001 for a, b in zip(times, expected, strict=True)
                )
        report[key] = {"stats": stats, "consistent": consistent, "process_rows": rows}
    devices = cfg.get("devices", [])
    hosts: dict[str, list[int]] = {}
    for proc, dev in enumerate(devices):
        hosts.setdefault(dev["hostname"], []).append(proc)
    report["node_groups"] = list(hosts.values())
    return report


def mask(text: str) -> str:
    """Hide what changes between runs: times, bandwidths, pids, host and torch version."""
    lines = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            chars = list(line)
            for half in (52, 85):
                chars[half + 2 : half + 9] = "TTTTTTT"
                chars[half + 11 : half + 17] = "AAAAAA"
                chars[half + 19 : half + 25] = "BBBBBB"
            line = "".join(chars)
        line = re.sub(r"torch \S+", "torch X", line)
        line = re.sub(r"Pid +\d+ on +\S+", "Pid PPPPPP on HHHHHHHHHH", line)
        line = re.sub(r"(Avg bus bandwidth +: )\S+", r"\1X", line)
        lines.append(line)
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_output_layout_matches_golden_file(
    matrix: Matrix,
) -> None:
    nranks, results = matrix.nranks, matrix.results
    golden = HERE / "golden" / f"all_reduce_{nranks}ranks.txt"
    assert mask(results[0][0]) == golden.read_text()


@pytest.mark.slow
def test_corrupted_result_is_reported_and_exits_non_zero() -> None:
    proc = torchrun(
        3,
        str(HERE / "scripts" / "broken.py"),
        *["all_reduce", "-b", "64", "-e", "256", "-f", "4", "-n", "1", "-w", "0", "-c", "2"],
    )
    assert proc.returncode != 0
    log = parse_log(proc.stdout)
    # Ranks 1 and 2 each have one wrong element in each checked half.
    assert [
        (r.out_of_place.wrong, r.in_place.wrong) for r in log.rows if r.out_of_place and r.in_place
    ] == [("2", "2"), ("2", "2")]
    # nccl-tests counts, per row half, the ranks that saw a wrong value: 2 rows x 2 halves x
    # 2 ranks (the -c 2 runs stop at the first that fails).
    assert "# Out of bounds values : 8 FAILED" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "floor,exit_code,expected",
    [
        ("1000000", 1, r"# Avg bus bandwidth    : \S+ FAILED\n"),
        ("fast", 2, r"tenter perf: error: NCCL_TESTS_MIN_BW='fast' is not a number; set it"),
    ],
)
def test_min_bw_gate_fails_the_run(
    floor: str, exit_code: int, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("NCCL_TESTS_MIN_BW", floor)
    proc = torchrun(2, "-m", "tenter.perf", *["all_reduce", "-b", "8", "-e", "8", "-n", "1"])
    assert proc.returncode != 0
    assert re.search(expected, proc.stdout + proc.stderr), proc.stdout + proc.stderr
    # torchrun reports the first rank to fail, with its exit status.
    assert re.search(rf"failed \(exitcode: {exit_code}\) local_rank: \d", proc.stderr)


@pytest.mark.slow
def test_tenter_perf_runs_as_a_tenter_job(tmp_path: Path) -> None:
    results = tmp_path / "sendrecv.json"
    done = tenter(
        *["perf", "sendrecv", "-b", "8", "-e", "64", "-f", "8", "-n", "1", "-J", str(results)],
        *["--hosts", "2", "--procs-per-host", "1"],
    )
    assert done.returncode == 0, done.stderr
    # Rank 0 only, untagged: the JSON notice, then the table.
    assert done.stdout.startswith(f"# Writing JSON output to {results}\n# tenter perf ")
    log = parse_log(done.stdout)
    assert [r.size for r in log.rows] == [8, 64]
    doc = json.loads(results.read_text())
    assert [r["size"] for r in doc["results"]] == [8, 64]
    assert [d["hostname"] for d in doc["config"]["devices"]] == ["algo-1", "algo-2"]
    assert "on     algo-1 device" in done.stdout and "on     algo-2 device" in done.stdout
    assert_nothing_left(done.job_dir)


@pytest.mark.slow
@pytest.mark.cuda
def test_cuda_paths_run_with_zero_wrong_on_nccl() -> None:
    """mulsum (PREMUL_SUM), fp8 and per-iteration CUDA-event timing exist only on CUDA."""
    nranks = torch.cuda.device_count()
    proc = torchrun(
        nranks,
        "-m",
        "tenter.perf",
        *["all_reduce", "--device", "cuda", "-b", "1K", "-e", "64K", "-f", "8", "-n", "3"],
        *["-o", "all", "-d", "all", "-I", "1", "-z", "3", "-m", "2"],
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    log = parse_log(proc.stdout)
    # Every type and reduction NCCL runs, three sizes each; what it cannot run (no unsigned
    # wide types in torch, no fp8 average, bfloat16's factor lost by torch) is skipped, said.
    runs = {(t, o) for t in NCCL_TYPES for o in NCCL_OPS if not unsupported("nccl", t, o)}
    assert sorted((r.type, r.redop) for r in log.rows) == sorted(3 * list(runs))
    assert {"mulsum", "sum"} <= {o for _, o in runs}
    assert {"f8e4m3", "f8e5m2"} <= {t for t, _ in runs}
    assert "# Skipping bfloat16 mulsum: torch's nccl backend hands NCCL" in proc.stdout
    assert "# Skipping f8e5m2 avg: NCCL does not average fp8" in proc.stdout
    assert all(h.wrong == "0" for r in log.rows for h in r.halves), proc.stdout
    assert "# Out of bounds values : 0 OK" in proc.stdout
