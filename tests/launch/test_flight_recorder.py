"""Hang culprits from torch's flight recorder: the pure comparison of the ranks' dumps, and a
real DDP job (collectives from C++ only) with one rank frozen."""

from __future__ import annotations

from pathlib import Path

import pytest

from tenter.errors import ExitCode
from tenter.launch.diagnosis.flight_recorder import culprits
from tests.conftest import assert_nothing_left, tenter
from tests.launch.specs import write_spec

HOSTS = {0: "algo-1", 1: "algo-1", 2: "algo-2"}


def dump(*collectives: tuple[str, list[list[int]]], group: str = "default_pg") -> dict[str, object]:
    entries = [
        {
            "collective_seq_id": seq,
            "profiling_name": name,
            "input_sizes": sizes,
            "process_group": ("0", group),
            "is_p2p": False,
        }
        for seq, (name, sizes) in enumerate(collectives, 1)
    ]
    return {"version": "2.10", "entries": entries}


ALL_REDUCE = ("gloo:all_reduce", [[9]])


def test_culprits_name_rank_behind_and_the_collective_it_did_not_issue() -> None:
    dumps = {0: dump(ALL_REDUCE, ALL_REDUCE, ALL_REDUCE), 1: dump(ALL_REDUCE, ALL_REDUCE)}
    dumps[2] = dumps[0]
    (line,) = culprits(dumps, HOSTS)
    assert line.startswith(
        "flight recorder: rank 1 on algo-1 is behind in process group 0/default_pg: its last "
        "collective is gloo:all_reduce #2 [[9]]"
    )
    assert line.endswith("they wait for rank 1 in collective #3")


def test_culprits_name_mismatched_collective() -> None:
    broadcast = ("gloo:broadcast", [[1]])
    dumps = {0: dump(ALL_REDUCE, ALL_REDUCE), 1: dump(ALL_REDUCE, broadcast)}
    assert culprits(dumps, HOSTS) == [
        "flight recorder: collective #2 of process group 0/default_pg is mismatched: "
        "rank 0 gloo:all_reduce #2 [[9]], rank 1 gloo:broadcast #2 [[1]]"
    ]


def test_culprits_are_none_if_ranks_agree_or_one_dump_only() -> None:
    assert culprits({0: dump(ALL_REDUCE), 1: dump(ALL_REDUCE)}, HOSTS) == []
    assert culprits({0: dump(ALL_REDUCE)}, HOSTS) == []


@pytest.mark.slow
def test_hang_report_names_frozen_ddp_rank_and_sequence_number_from_flight_recorder(
    tmp_path: Path,
) -> None:
    # DDP's gradient all-reduce is issued by its C++ reducer: tenter's Python collective
    # counters see none of it (the report says "no collective yet"); the recorder does.
    spec = write_spec(
        tmp_path,
        "ddp_freeze.py",
        instance_count=2,
        processes_per_host=2,
        elastic={"hang_timeout": 3},
        environment={"FREEZE_RANK": "3"},
    )
    done = tenter("run", str(spec))
    assert done.returncode == ExitCode.HANG
    report = (done.job_dir / "hang-report.txt").read_text()
    # DDP's construction broadcasts (and checks the parameters' shapes): the steps' all-reduces
    # follow; 4 steps done, rank 3 never issues the one of step 5.
    (line,) = [line for line in report.splitlines() if line.startswith("flight recorder:")]
    assert line.startswith("flight recorder: rank 3 on algo-2 is behind in process group ")
    assert "its last collective is gloo:all_reduce #" in line
    last = int(line.split("its last collective is gloo:all_reduce #")[1].split()[0])
    assert line.endswith(f"they wait for rank 3 in collective #{last + 1}")
    assert done.summary["goodput"]["parts"]["hang"] > 3.0  # type: ignore[index]
    assert_nothing_left(done.job_dir)
