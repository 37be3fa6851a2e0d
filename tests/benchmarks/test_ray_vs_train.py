"""benchmarks/ray_vs_train.py's arguments, counting and table (its runs need Ray Train, which
CI does not install: the benchmark itself is run by hand, docs/ray.md)."""

from __future__ import annotations

import pytest
import torch

from tests.benchmarks.scripts import load

bench = load("ray_vs_train")

# Rank 0's lines of a run launched at 100.0 whose last rank was killed at 110.0 after step 25:
# restarted from the checkpoint of step 20, first step again at 114.5.
STEPS = "start 0 103.0\nstep 1 104.0\nstep 2 104.1\nstep 25 109.9\nstart 20 113.0\nstep 21 114.5\n"


def test_launch_and_recovery_are_counted_from_the_starts_not_from_the_step_numbers() -> None:
    launch, recover, resumed_at = bench.measure(STEPS, started=100.0, killed=110.0)
    assert (launch, recover, resumed_at) == (pytest.approx(4.0), pytest.approx(4.5), 20)


def test_a_run_that_never_restarted_is_refused_not_counted() -> None:
    with pytest.raises(ValueError, match="started 1 times, not twice"):
        bench.measure("start 0 103.0\nstep 1 104.0\n", started=100.0, killed=110.0)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--kill-step", "60"], "--kill-step 60 must be from --checkpoint-every (10) to below"),
        (["--kill-step", "5"], "--kill-step 5 must be from"),
        (["--hosts", "0"], "--hosts must be at least 1"),
    ],
)
def test_arguments_that_would_measure_no_recovery_exit_2_naming_the_flag(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as ended:
        bench.parse_args(argv)
    assert ended.value.code == 2
    assert said in capsys.readouterr().err


def run(launch: float, recover: float, weight: float) -> object:
    return bench.Run(launch, recover, 20, launch + 10, {"w": torch.tensor([weight])})


def test_the_table_has_the_ratios_and_says_when_parameters_differ() -> None:
    runs = {
        "ray_train": [run(20.0, 10.0, 1.0), run(30.0, 12.0, 1.0)],
        "tenter": [run(5.0, 2.0, 1.0), run(6.0, 3.0, 1.5)],
    }
    lines = bench.table(runs)
    assert "  ratio tenter/ray_train launch_s: 0.22   (target <= 1)" in lines
    assert "  ratio tenter/ray_train recover_s: 0.23   (target <= 1)" in lines
    assert lines[-1] == (
        "  final parameters: NOT identical (max |diff| 0.5): 3 of 4 runs bit for bit equal"
    )
    runs["tenter"][1] = run(6.0, 3.0, 1.0)
    assert bench.table(runs)[-1] == ("  final parameters: identical: 4 of 4 runs bit for bit equal")
