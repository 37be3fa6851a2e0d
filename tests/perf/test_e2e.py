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
from dataclasses import dataclass
from pathlib import Path

import pytest

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
]
GOOD = range(len(CONFIGS))
TOO_BIG = len(CONFIGS)
BAD_ROOT = TOO_BIG + 1
WITH_JSON = TOO_BIG + 2
UNSUPPORTED = TOO_BIG + 3


def torchrun(nproc: int, *args: str) -> subprocess.CompletedProcess[str]:
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
        env={**os.environ, "OMP_NUM_THREADS": "1"},
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
        f"all_gather -b 64 -e 256 -f 2 -n 1 --json {out / 'ag.json'}",
        "all_reduce -b 8 -e 8 -o avg -d int8",
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


def expected_rows(config: str) -> int:
    args = config.split()
    sizes = {"-b 8 -e 4K -f 8": 4, "-b 256 -e 1K -f 4": 2, "-b 1K -e 3K -i 1K": 3}
    n = next((v for k, v in sizes.items() if k in config), 1)
    types = 8 if "-d all" in config else 1
    reduces = args[0] in ("all_reduce", "reduce_scatter", "reduce")
    ops = 5 if "-o all" in config and reduces else 1
    # gloo cannot average integers: -o all skips avg for the 4 integer types.
    skipped = 4 if "-o all" in config and "-d all" in config else 0
    return n * (types * ops - skipped)


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
    assert [r.type for r in parse_log(results[7][0]).rows][::5] == [
        "float",
        "double",
        "half",
        "bfloat16",
        "int32",
        "int64",
        "int8",
        "uint8",
    ]


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
        "integer tensors cannot hold; choose another -o or -d"
    }


@pytest.mark.slow
def test_json_has_one_record_per_size(
    matrix: Matrix,
) -> None:
    nranks, text = matrix.nranks, matrix.results[WITH_JSON][0]
    log = parse_log(text)
    doc = json.loads((matrix.out / "ag.json").read_text())
    assert [r["size"] for r in doc["results"]] == [r.size for r in log.rows]
    assert doc["results"][0]["out_of_place"]["nwrong"] == 0
    assert doc["results"][0]["redop"] == "none" and doc["results"][0]["root"] == -1
    assert doc["out_of_bounds"] == {"count": 0, "okay": True}
    halves = [h["bus_bw"] for r in doc["results"] for h in (r["out_of_place"], r["in_place"])]
    assert doc["average_bus_bandwidth"]["bandwidth"] == pytest.approx(sum(halves) / len(halves))
    assert len(doc["devices"]) == nranks and doc["config"]["nranks"] == nranks


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
        2,
        str(HERE / "scripts" / "broken.py"),
        "all_reduce",
        "-b",
        "64",
        "-e",
        "256",
        "-f",
        "4",
        "-n",
        "1",
        "-w",
        "0",
    )
    assert proc.returncode != 0
    log = parse_log(proc.stdout)
    assert [
        (r.out_of_place.wrong, r.in_place.wrong) for r in log.rows if r.out_of_place and r.in_place
    ] == [("1", "1"), ("1", "1")]
    assert "# Out of bounds values : 4 FAILED" in proc.stdout


@pytest.mark.slow
def test_tenter_perf_runs_as_a_tenter_job() -> None:
    done = tenter(
        "perf",
        "sendrecv",
        "-b",
        "8",
        "-e",
        "64",
        "-f",
        "8",
        "-n",
        "1",
        "--hosts",
        "2",
        "--procs-per-host",
        "1",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# tenter perf "), done.stdout  # rank 0 only, untagged
    log = parse_log(done.stdout)
    assert [r.size for r in log.rows] == [8, 64]
    assert "on     algo-1 device" in done.stdout and "on     algo-2 device" in done.stdout
    assert_nothing_left(done.job_dir)
