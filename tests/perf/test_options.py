"""Flag parsing: every nccl-tests flag is accepted with its meaning, or refused with the
reason (exit 2, flag named, fix said); nccl-tests' sizes and sweeps."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from tenter.cli.main import main
from tenter.perf.options import PerfOptions, format_size, options_from_args, parse_size
from tenter.perf.worker import build_parser

REPO = Path(__file__).resolve().parents[2]

NCCL_TESTS_GETOPT = "t:g:b:e:i:f:n:m:w:N:p:I:K:c:o:d:r:z:y:T:hG:C:a:R:x:D:V:J:S:M:u:"
"""nccl-tests' short options (src/common.cu, getopt_long), with their long names below."""
NCCL_TESTS_LONG = {
    "t": "nthreads",
    "g": "ngpus",
    "b": "minbytes",
    "e": "maxbytes",
    "i": "stepbytes",
    "f": "stepfactor",
    "n": "iters",
    "m": "agg_iters",
    "w": "warmup_iters",
    "N": "run_cycles",
    "p": "parallel_init",
    "c": "check",
    "o": "op",
    "d": "datatype",
    "r": "root",
    "z": "blocking",
    "y": "stream_null",
    "T": "timeout",
    "G": "cudagraph",
    "C": "report_cputime",
    "S": "report_timestamps",
    "J": "output_file",
    "a": "average",
    "R": "local_register",
    "x": "cta_policy",
    "D": "device_implementation",
    "V": "device_cta_count",
    "M": "memory",
    "u": "unalign",
    "I": "per_iter_timing",
    "K": "per_iter_skip",
    "h": "help",
}


def test_every_nccl_tests_flag_is_known_by_its_short_and_long_name() -> None:
    known = build_parser()._option_string_actions
    letters = NCCL_TESTS_GETOPT.replace(":", "")
    assert set(letters) == set(NCCL_TESTS_LONG)
    for letter in letters:
        assert f"-{letter}" in known and f"--{NCCL_TESTS_LONG[letter]}" in known, letter
        assert known[f"-{letter}"] is known[f"--{NCCL_TESTS_LONG[letter]}"], letter


def test_docs_table_covers_every_nccl_tests_flag() -> None:
    page = (REPO / "docs" / "perf.md").read_text()
    for letter, name in NCCL_TESTS_LONG.items():
        assert f"`-{letter}/--{name}`" in page, letter


@pytest.mark.parametrize(
    "text,expected",
    [
        ("8", 8),
        ("64K", 64 << 10),
        ("128M", 128 << 20),
        ("1G", 1 << 30),
        ("2g", 2 << 30),
        ("4KB", 4 << 10),
        ("0.5G", 1 << 29),
        ("1.5M", 3 << 19),
        ("1e3", 1000),
        ("0.3K", 307),  # nccl-tests truncates to whole bytes
    ],
)
def test_parse_size_reads_nccl_tests_sizes(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("nbytes", [8, 1 << 10, 3 << 19, 1 << 30, 1000])
def test_format_size_round_trips(nbytes: int) -> None:
    assert parse_size(format_size(nbytes)) == nbytes


@pytest.mark.parametrize("text", ["lots", "-1", "1.5X", "K", ""])
def test_parse_size_rejects_non_sizes(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=r"is not a size; write bytes as a"):
        parse_size(text)


def test_sizes_step_geometrically_or_linearly_as_nccl_tests() -> None:
    assert PerfOptions("all_reduce", 8, 128, stepfactor=2).sizes() == [8, 16, 32, 64, 128]
    assert PerfOptions("all_reduce", 8, 100, stepfactor=4).sizes() == [8, 32]
    assert PerfOptions("all_reduce", 1024, 4096, stepbytes=1024).sizes() == [1024, 2048, 3072, 4096]
    # -f 1 (or 0) steps linearly by -i, as nccl-tests does.
    assert PerfOptions("all_reduce", 8, 24, stepfactor=1, stepbytes=8).sizes() == [8, 16, 24]


def _parse(*flags: str) -> PerfOptions:
    args = build_parser().parse_args(["all_reduce", *flags])
    return options_from_args(args.collective, args)


@pytest.mark.parametrize(
    "flags,field,value",
    [
        (["-f", "1", "-i", "8"], "stepfactor", 1),
        (["-f", "0"], "stepfactor", 0),
        (["-b", "0.5K", "-e", "1K"], "minbytes", 512),
        (["-m", "4"], "agg_iters", 4),
        (["--agg_iters", "4"], "agg_iters", 4),
        (["-N", "0"], "run_cycles", 0),
        (["-N", "3"], "run_cycles", 3),
        (["-z", "2"], "blocking", 2),
        (["-z", "3"], "blocking", 3),
        (["-T", "30"], "timeout", 30),
        (["-C", "1"], "report_cputime", True),
        (["-S", "1"], "report_timestamps", True),
        (["-M", "1"], "memory_report", True),
        (["-u", "3"], "unalign", 3),
        (["-I", "1"], "per_iter_timing", True),
        (["-I", "1", "-K", "2"], "per_iter_skip", 2),
        (["-p", "1"], "parallel_init", True),
        (["-o", "mulsum"], "ops", ("mulsum",)),
        (["-o", "all"], "ops", ("sum", "prod", "max", "min", "avg", "mulsum")),
        (["-d", "uint32"], "datatypes", ("uint32",)),
        (["-d", "uint64"], "datatypes", ("uint64",)),
        (["-J", "r.json"], "output_file", "r.json"),
        (["--output_file", "r.JSON"], "output_file", "r.JSON"),
        (["--json", "r.json"], "output_file", "r.json"),
        (["-n", "0x10"], "iters", 16),  # strtol's base prefixes
        # nccl-tests-only flags at their defaults change nothing.
        (
            ["-t", "1", "-g", "1", "-y", "0", "-G", "0", "-R", "0", "-D", "0", "-V", "16"],
            "iters",
            20,
        ),
    ],
)
def test_nccl_tests_flags_are_accepted_with_their_meaning(
    flags: list[str], field: str, value: object
) -> None:
    assert getattr(_parse(*flags), field) == value


def test_argv_round_trips_through_the_worker_parser() -> None:
    opts = PerfOptions(
        "broadcast",
        8,
        1 << 20,
        stepfactor=2,
        iters=3,
        agg_iters=2,
        run_cycles=2,
        ops=("prod",),
        datatypes=("uint32",),
        root=1,
        average=3,
        blocking=3,
        timeout=9,
        report_cputime=True,
        report_timestamps=True,
        memory_report=True,
        unalign=1,
        per_iter_timing=True,
        per_iter_skip=1,
        parallel_init=True,
        output_file="/tmp/x.json",
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
        (["-f", "-2"], r"argument -f/--stepfactor: -2 is below the minimum of 0"),
        (["-b", "0", "-f", "2"], r"-b/--minbytes 0 with -f/--stepfactor 2 would never grow"),
        (["-r", "4", "--procs-per-host", "2"], r"-r/--root 4 is not a rank of this job \(2 ranks"),
        (["-d", "fp8"], r"argument -d/--datatype: invalid choice: 'fp8'"),
        (["-z", "4"], r"argument -z/--blocking: 4 is not one of 0, 1, 2, 3"),
        (["-a", "-1"], r"argument -a/--average: -1 is below the minimum of 0"),
        (["-I", "2"], r"argument -I/--per_iter_timing: 2 is not one of 0, 1"),
        (["-C", "2"], r"argument -C/--report_cputime: 2 is not one of 0, 1"),
        (["-m", "0"], r"argument -m/--agg_iters: 0 is below the minimum of 1"),
        (["-N", "-1"], r"argument -N/--run_cycles: -1 is below the minimum of 0"),
        (["-K", "1"], r"-K/--per_iter_skip 1 leaves iterations out of .* add -I 1 or drop -K"),
        (["-I", "1", "-K", "5", "-n", "5"], r"-K/--per_iter_skip 5 would skip all 5 timed"),
        (["-J", "out.txt"], r"-J/--output_file out.txt: nccl-tests infers the format from the"),
        (["-J", "/nonexistent/dir/r.json"], r"-J/--output_file /nonexistent/dir/r.json: cannot"),
        (
            ["-g", "8"],
            r"argument -g/--ngpus: 8: a torch.distributed rank is one process driving one "
            r"device, so there is no second GPU within a rank. Instead: run 8 ranks per host: "
            r"--procs-per-host 8 \(tenter perf\) or torchrun --nproc-per-node 8$",
        ),
        (["-t", "2"], r"argument -t/--nthreads: 2: .* no second thread within a rank\. Instead"),
        (["-y", "1"], r"argument -y/--stream_null: 1: .*own internal streams.* leave -y at 0$"),
        (["-G", "10"], r"argument -G/--cudagraph: 10: .*does not capture them in CUDA graphs"),
        (["-R", "1"], r"argument -R/--local_register: 1: .*ALLOCATOR_HOOK=1"),
        (["-x", "1"], r"argument -x/--cta_policy: 1: .*CTA policy.* leave -x out$"),
        (["-D", "1"], r"argument -D/--device_implementation: 1: those kernels are part of"),
        (["-V", "32"], r"argument -V/--device_cta_count: 32: it only sizes the -D kernels"),
        (["-g", "two"], r"argument -g/--ngpus: 'two' is not a whole number"),
        # What the backend cannot run is refused before anything is launched.
        (["-d", "uint32"], r"-o/--op sum with -d/--datatype uint32: torch.distributed.s gloo"),
        (["-o", "mulsum"], r"-o/--op mulsum with -d/--datatype float: mulsum is NCCL's pre"),
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


def test_a_bad_min_bw_is_refused_before_launching(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("NCCL_TESTS_MIN_BW", "fast")
    with pytest.raises(SystemExit) as exit_info:
        main(["perf", "all_reduce"])
    assert exit_info.value.code == 2
    assert "error: NCCL_TESTS_MIN_BW='fast' is not a number" in capsys.readouterr().err


def test_compare_labels_must_match_the_logs(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["perf", "compare", "a.log", "b.log", "--labels", "only-one"])
    assert exit_info.value.code == 2
    assert "--labels names 1 run(s) but 2 log(s) were given" in capsys.readouterr().err
