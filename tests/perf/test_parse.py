"""The parser on real nccl-tests logs: both layouts, with and without mpirun's tags."""

from __future__ import annotations

from pathlib import Path

import pytest

from tenter.perf.parse import Measurement, parse_log, untag

DATA = Path(__file__).parent / "data"


@pytest.mark.parametrize(
    "name,nrows,first_size,last_size,max_busbw,reported_avg",
    [
        ("new_tagged_aws_batch_all_reduce.log", 32, 8, 17179869184, 483.35, 156.742),
        ("new_untagged_dgx_spark_all_gather.log", 6, 536870912, 17179869184, 24.20, 22.1205),
        ("old_tagged_aws_efa_eks_all_reduce.log", 28, 8, 1073741824, 32.84, 7.80081),
        ("old_untagged_efa_p3dn_all_reduce.log", 29, 8, 2147483648, 2.60, 1.16154),
    ],
)
def test_parse_log_gives_rows_max_and_average_of_real_logs(
    name: str, nrows: int, first_size: int, last_size: int, max_busbw: float, reported_avg: float
) -> None:
    log = parse_log((DATA / name).read_text())
    assert len(log.rows) == nrows
    assert (log.rows[0].size, log.rows[-1].size) == (first_size, last_size)
    assert [r.size for r in log.rows] == sorted(r.size for r in log.rows)
    assert log.max_busbw == pytest.approx(max_busbw)
    assert log.reported_avg_busbw == pytest.approx(reported_avg)
    # The rows are printed to 0.01: their mean is nccl-tests' own average to that precision.
    assert log.avg_busbw == pytest.approx(reported_avg, abs=0.01)
    assert log.out_of_bounds == 0


def test_new_layout_reads_redop_root_and_wrong_count() -> None:
    log = parse_log((DATA / "new_tagged_aws_batch_all_reduce.log").read_text())
    row = log.rows[20]
    assert (row.size, row.count, row.type, row.redop, row.root) == (
        8388608,
        2097152,
        "float",
        "sum",
        -1,
    )
    assert row.out_of_place == Measurement(84.29, 99.52, 174.16, "0")
    assert row.in_place == Measurement(83.22, 100.80, 176.40, "0")


def test_old_layout_reads_error_column_and_no_root() -> None:
    log = parse_log((DATA / "old_tagged_aws_efa_eks_all_reduce.log").read_text())
    row = log.rows[-1]
    assert (row.type, row.redop, row.root) == ("float", "sum", None)
    assert row.out_of_place == Measurement(61556, 17.44, 32.71, "5e-07")
    assert row.in_place == Measurement(61303, 17.52, 32.84, "5e-07")


def test_untagged_and_tagged_copies_of_a_log_parse_the_same() -> None:
    tagged = (DATA / "new_tagged_aws_batch_all_reduce.log").read_text()
    untagged = "\n".join(untag(line) for line in tagged.splitlines())
    assert "<stdout>" not in untagged
    assert parse_log(untagged) == parse_log(tagged)


def test_untag_strips_mpirun_tenter_and_launcher_prefixes() -> None:
    assert untag("[1,0]<stdout>:#  Avg") == "#  Avg"
    assert untag("[algo-1,0]<stdout>:   8  2") == "   8  2"
    assert untag("(head, rank=0, pid=3808) [1,0]<stdout>:# x") == "# x"
    assert untag("#  Rank  0 Group  0 [0x10]") == "#  Rank  0 Group  0 [0x10]"


def test_old_all_gather_without_redop_column() -> None:
    # Layout of nccl-tests' old all_gather.cu print_header / print_line_header.
    text = (
        "#       size         count    type     time   algbw   busbw  error"
        "     time   algbw   busbw  error\n"
        "        1024            64   float    30.10    0.03    0.03  0e+00"
        "    29.80    0.03    0.03  0e+00\n"
    )
    (row,) = parse_log(text).rows
    assert (row.size, row.count, row.type, row.redop) == (1024, 64, "float", None)
    assert row.in_place == Measurement(29.80, 0.03, 0.03, "0e+00")


def test_lines_outside_a_table_are_not_rows() -> None:
    assert parse_log("8 2 float sum -1 1 2 3 0 1 2 3 0\n").rows == []
