"""``tenter perf compare``: side-by-side table, JSON and plot of real logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tenter.cli.main import main
from tenter.perf.results_json import read_results

DATA = Path(__file__).parent / "data"
P5 = str(DATA / "new_tagged_aws_batch_all_reduce.log")
P4D = str(DATA / "old_tagged_aws_efa_eks_all_reduce.log")
P3DN = str(DATA / "old_untagged_efa_p3dn_all_reduce.log")


def test_compare_prints_busbw_per_size_with_ratios(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out_json, png = tmp_path / "cmp.json", tmp_path / "busbw.png"
    code = main(
        [
            "perf",
            "compare",
            P5,
            P4D,
            P3DN,
            "--labels",
            "p5,p4d,p3dn",
            "--json",
            str(out_json),
            "--plot",
            str(png),
        ]
    )
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == '# tenter perf compare: in-place busbw (GB/s) per size; ratio = run / "p5"'
    assert lines[1].split() == ["#", "size", "type", "redop", "p5", "p4d", "ratio", "p3dn", "ratio"]
    row_1g = next(line for line in lines if line.split()[0] == "1073741824")
    assert row_1g.split() == [
        "1073741824",
        "float",
        "sum",
        "441.57",
        "32.84",
        "0.07",
        "2.59",
        "0.01",
    ]
    # Sizes only one log has show "-" for the others (the p5 log goes to 16 GB).
    row_16g = next(line for line in lines if line.split()[0] == "17179869184")
    assert row_16g.split()[3:] == ["483.35", "-", "-", "-", "-"]
    assert lines[-2].split()[:5] == ["#", "max", "busbw", "483.35", "32.84"]
    assert lines[-1].split()[:3] == ["#", "avg", "busbw"]

    doc = json.loads(out_json.read_text())
    assert [r["label"] for r in doc["runs"]] == ["p5", "p4d", "p3dn"]
    assert doc["runs"][1]["max_busbw"] == pytest.approx(32.84)
    assert doc["runs"][1]["reported_avg_busbw"] == pytest.approx(7.80081)
    first = doc["table"][0]
    assert first["size"] == 8 and first["busbw"] == [0.0, 0.0, 0.0]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_compare_labels_default_to_file_names(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["perf", "compare", P4D, P3DN]) == 0
    header = capsys.readouterr().out.splitlines()[1].split()
    assert header[4:] == [
        "old_tagged_aws_efa_eks_all_reduce",
        "old_untagged_efa_p3dn_all_reduce",
        "ratio",
    ]


@pytest.mark.parametrize(
    "name,content,message",
    [
        ("empty.log", "nothing here\n", "has no benchmark rows"),
        (
            "other.json",
            '{"results": [{"size": 8}]}',
            "is JSON but not an nccl-tests or tenter perf results file",
        ),
        ("list.json", "[1, 2]", "has no benchmark rows"),
        ("cut.json", '{"version":3,"results":[', "is JSON but not an nccl-tests or tenter"),
    ],
)
def test_compare_rejects_a_file_without_results(
    name: str, content: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(SystemExit) as exit_info:
        main(["perf", "compare", str(path)])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_compare_reads_nccl_tests_json_and_tenters_older_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    nccl, old = DATA / "nccl_tests_all_reduce.json", DATA / "tenter_v1_all_reduce.json"
    assert main(["perf", "compare", str(nccl), str(old), "--labels", "h100,gloo"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split() for line in lines[2:4]] == [
        ["8388608", "float", "sum", "161.72", "1.05", "0.01"],
        ["16777216", "float", "sum", "184.41", "1.06", "0.01"],
    ]


@pytest.mark.parametrize(
    "name,collective,avg,roots,wrong",
    [
        ("nccl_tests_all_reduce.json", "all_reduce_perf", 172.487703, [-1, -1], ["0", "0"]),
        ("tenter_v1_all_reduce.json", "all_reduce_perf", 1.05025, [-1, -1], ["0", "N/A"]),
    ],
)
def test_results_files_read_as_logs(
    name: str, collective: str, avg: float, roots: list[int], wrong: list[str]
) -> None:
    log = read_results(DATA / name)
    assert log.collective == collective and log.out_of_bounds == 0
    assert log.reported_avg_busbw == pytest.approx(avg)
    assert log.avg_busbw == pytest.approx(avg, abs=0.01)
    assert [r.root for r in log.rows] == roots
    assert [r.out_of_place.wrong for r in log.rows if r.out_of_place] == wrong


LOG_HEAD = (DATA / "old_untagged_efa_p3dn_all_reduce.log").read_text().splitlines(keepends=True)
LOG_HEAD = "".join(LOG_HEAD[2:6])  # nccl-tests' header: the out-of-place and in-place halves


def test_compare_footer_sums_up_the_column_the_table_shows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Out-of-place 1.24 GB/s where in-place is 0.54 (a tenter perf run on gloo): the footer's
    # max and mean are the in-place column's, so its ratio is the rows' (was 1.24 / ...).
    rows = {
        "a.log": [("1024", "0.90", "0.50"), ("2048", "1.00", "0.60")],
        "b.log": [("1024", "1.24", "0.54"), ("2048", "1.10", "0.66")],
    }
    for name, lines in rows.items():
        body = "".join(
            f"{size:>12} {int(size) // 4:>13}   float     sum    10.00  {oop}  {oop}  0e+00"
            f"    10.00  {ip}  {ip}  0e+00\n"
            for size, oop, ip in lines
        )
        (tmp_path / name).write_text(LOG_HEAD + body + "# Avg bus bandwidth    : 0.8\n")
    assert main(["perf", "compare", str(tmp_path / "a.log"), str(tmp_path / "b.log")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[-2].split() == ["#", "max", "busbw", "0.60", "0.66", "1.10"]
    assert lines[-1].split() == ["#", "avg", "busbw", "0.55", "0.60", "1.09"]
