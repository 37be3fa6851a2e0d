"""benchmarks/goodput_ledger_scale.py at a tiny size: its made-up job's ledger is the one
described, and a ledger pass grows linearly with the steps (the quadratic one had slope 2)."""

from __future__ import annotations

import re

import pytest

from tenter.goodput.ledger import build_ledger
from tests.benchmarks.scripts import load

bench = load("goodput_ledger_scale")


def test_the_made_up_job_saves_restarts_and_redoes_the_steps_since_its_last_save() -> None:
    run = bench.records(ranks=2, steps=1000, every=100)
    ledger = build_ledger([run], run.end)
    assert (ledger.productive_steps, ledger.lost_steps) == (1000, 50)  # 701-750 twice
    assert ledger.parts["lost"] == pytest.approx(49 * bench.STEP_S)  # 701's wait is the fault
    assert ledger.parts["fault"] == pytest.approx(bench.STEP_S + 1.0)
    assert ledger.parts["checkpoint"] == pytest.approx(10 * bench.SAVE_S)
    assert ledger.parts["startup"] == pytest.approx(bench.STARTUP_S + 0.0005 + bench.STEP_S)


def test_the_benchmark_prints_a_linear_slope_at_a_small_size(capsys) -> None:
    bench.main(["--ranks", "2", "--steps", "4000,40000", "--every", "10", "--reps", "5"])
    line = re.search(r"^ledger (.*)$", capsys.readouterr().out, re.MULTILINE)
    assert line is not None
    figures = dict(field.split("=") for field in line.group(1).split())
    assert (figures["ranks"], figures["steps"]) == ("2", "40000")
    assert float(figures["slope"]) < 1.5  # the first ledger's was 2: a save carved per segment
