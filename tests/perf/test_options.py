"""Flag parsing: nccl-tests' sizes and sweeps, and clear errors (exit 2, flag named, fix said)."""

from __future__ import annotations

import argparse
import re

import pytest

from tenter.cli.main import main
from tenter.perf.options import PerfOptions, format_size, options_from_args, parse_size
from tenter.perf.worker import build_parser


@pytest.mark.parametrize(
    "text,expected",
    [
        ("8", 8),
        ("64K", 64 << 10),
        ("128M", 128 << 20),
        ("1G", 1 << 30),
        ("2g", 2 << 30),
        ("4KB", 4 << 10),
    ],
)
def test_parse_size_reads_binary_units(text: str, expected: int) -> None:
    assert parse_size(text) == expected
    assert parse_size(format_size(expected)) == expected


def test_parse_size_rejects_non_sizes() -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"'1.5M' is not a size"):
        parse_size("1.5M")


def test_sizes_step_geometrically_or_linearly_as_nccl_tests() -> None:
    assert PerfOptions("all_reduce", 8, 128, stepfactor=2).sizes() == [8, 16, 32, 64, 128]
    assert PerfOptions("all_reduce", 8, 100, stepfactor=4).sizes() == [8, 32]
    assert PerfOptions("all_reduce", 1024, 4096, stepbytes=1024).sizes() == [1024, 2048, 3072, 4096]


def test_argv_round_trips_through_the_worker_parser() -> None:
    opts = PerfOptions(
        "broadcast",
        8,
        1 << 20,
        stepfactor=2,
        iters=3,
        ops=("prod",),
        root=1,
        average=3,
        blocking=True,
        json="/tmp/x.json",
    )
    args = build_parser().parse_args(opts.argv())
    assert options_from_args(args.collective, args) == opts


@pytest.mark.parametrize(
    "flags,message",
    [
        (
            ["-b", "8M", "-e", "1K"],
            r"-b/--minbytes 8M is larger than -e/--maxbytes 1K; set -b at most -e",
        ),
        (["-o", "mean"], r"argument -o/--op: invalid choice: 'mean' \(choose from 'sum', 'prod'"),
        (
            ["-f", "2", "-i", "1M"],
            r"-f/--stepfactor 2 and -i/--stepbytes 1M were both given; pass only one",
        ),
        (["-b", "lots"], r"argument -b/--minbytes: 'lots' is not a size"),
        (["-f", "1"], r"argument -f/--stepfactor: 1 is below the minimum of 2"),
        (["-r", "4", "--procs-per-host", "2"], r"-r/--root 4 is not a rank of this job \(2 ranks"),
        (["-d", "fp8"], r"argument -d/--datatype: invalid choice: 'fp8'"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag_and_the_fix(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["perf", "all_reduce", *flags])
    assert exit_info.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert re.match(r"tenter perf all_reduce: error: " + message, last), last


def test_compare_labels_must_match_the_logs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["perf", "compare", "a.log", "b.log", "--labels", "only-one"])
    assert exit_info.value.code == 2
    assert "--labels names 1 run(s) but 2 log(s) were given" in capsys.readouterr().err
