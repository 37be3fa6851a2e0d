"""The live view: rows per rank from the reports, the status line, the table, metrics.jsonl."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from tenter.jobdir.layout import rank_file, rank_steps_file
from tenter.monitor.live import LiveView
from tenter.monitor.snapshot import render, status_line
from tests.monitor.helpers import T0, fake_job


def view_at(now: float) -> LiveView:
    """A view of a made-up 2 x 2 job (rank 3 twice as slow) whose clock reads ``now``."""
    return LiveView(fake_job(step_s={3: 2.0}), live=False, clock=lambda: now)


def test_poll_gives_each_rank_its_reported_progress_and_rates() -> None:
    view = view_at(T0 + 30)
    snap = view.poll()
    by_rank = {r.rank: r for r in snap.ranks}
    assert [(r.rank, r.host) for r in snap.ranks] == [
        (0, "algo-1"),
        (1, "algo-1"),
        (2, "algo-2"),
        (3, "algo-2"),
    ]
    assert by_rank[0].step == 11
    assert by_rank[0].samples == 11 * 32
    assert by_rank[0].loss == pytest.approx(1 / 11)
    assert by_rank[0].metrics == {"lr": 0.1}
    # 10 s window: steps 1..11 at 1 s apart -> 32 samples/s, 1 s per step; rank 3 is 2x slower.
    assert by_rank[0].samples_per_s == pytest.approx(32.0)
    assert by_rank[0].step_time_s == pytest.approx(1.0)
    assert by_rank[3].step_time_s == pytest.approx(2.0)
    assert snap.samples_per_s == pytest.approx(3 * 32 + 16)
    assert (snap.step, snap.total_steps) == (11, 100)
    assert snap.eta_s == pytest.approx(89 * 1.0)  # the median step time
    assert {r.state for r in snap.ranks} == {"running"}
    assert snap.gpus is False  # no GPU here; NVML paths are tested in test_gpu.py


def test_poll_shows_ddp_steps_tenter_counted_if_rank_does_not_report() -> None:
    view = view_at(T0 + 30)
    rank_file(view.plan.job_dir, 1).unlink()  # a rank of a script without tenter.report
    counted = rank_steps_file(view.plan.job_dir, 1)
    counted.parent.mkdir()
    counted.write_text("".join(f'{{"time": {T0 + s / 2}, "step": {s}}}\n' for s in range(1, 31)))
    rank = view.poll().ranks[1]
    assert (rank.state, rank.step, rank.samples, rank.loss) == ("running", 30, 0, None)
    assert rank.step_time_s == pytest.approx(0.5)  # over the last 10 s of its steps


def test_poll_marks_a_rank_failed_if_its_error_file_exists() -> None:
    view = view_at(T0 + 30)
    Path(view.plan.hosts[1].ranks[0].error_file).write_text("{}")
    states = {r.rank: r.state for r in view.poll().ranks}
    assert states == {0: "running", 1: "running", 2: "failed", 3: "running"}


def test_poll_appends_a_line_per_rank_to_metrics_jsonl() -> None:
    view = view_at(T0 + 30)
    view.poll()
    view.poll()
    lines = [json.loads(x) for x in (Path(view.plan.job_dir) / "metrics.jsonl").open()]
    assert [line["rank"] for line in lines] == [0, 1, 2, 3, 0, 1, 2, 3]
    assert lines[3] == lines[7] | {"time": T0 + 30}
    assert lines[3]["host"] == "algo-2" and lines[3]["step"] == 11
    assert lines[3]["step_time_s"] == pytest.approx(2.0)


def test_status_line_summarises_the_job_in_one_line_if_not_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    view = view_at(T0 + 30)
    assert status_line(view.poll()) == (
        "status: 4 running; elapsed 0.0 s  step 11/100 (11 %)  112 samples/s  ETA 89.0 s; "
        "step time 1.0 s (slowest: rank 3, 2.0 s); loss 0.09091"
    )
    view.stop()  # the last status line goes to stderr
    assert capsys.readouterr().err.startswith("tenter: status: 4 running; elapsed 0.0 s")


def test_render_draws_a_row_per_rank_and_the_progress() -> None:
    console = Console(record=True, width=120, file=io.StringIO())
    console.print(render(view_at(T0 + 30).poll()))
    text = console.export_text()
    header = text.splitlines()[1].split()
    assert header == [
        "host",
        "rank",
        "state",
        "step",
        "samples/s",
        "step",
        "time",
        "loss",
        "CPU",
        "%",
        "RSS",
    ]
    assert (
        " algo-2      3   running     11          16       2.0 s   0.09091       -     - " in text
    )
    assert "step 11/100 (11 %)  112 samples/s  ETA 89.0 s" in text


def blank_out(path: Path) -> None:
    """Overwrite every byte of ``path`` but its line ends with spaces, in place: a reader that
    reads the file again from the start finds blank lines, one that follows it nothing new."""
    path.write_bytes(bytes(b if b == ord("\n") else ord(" ") for b in path.read_bytes()))


def test_a_refresh_reads_only_the_lines_appended_since_the_previous_one() -> None:
    view = view_at(T0 + 30)
    first = {r.rank: (r.host, r.state, r.step, r.samples) for r in view.poll().ranks}
    job_dir = Path(view.plan.job_dir)
    for path in [job_dir / "logs" / "index.jsonl", *(job_dir / "metrics").glob("rank-*.jsonl")]:
        blank_out(path)
    with rank_file(view.plan.job_dir, 0).open("a") as fp:
        fp.write(json.dumps({"time": T0 + 11, "step": 12, "samples": 32}) + "\n")
    second = {r.rank: (r.host, r.state, r.step, r.samples) for r in view.poll().ranks}
    assert second == first | {0: ("algo-1", "running", 12, 32 * 12)}
