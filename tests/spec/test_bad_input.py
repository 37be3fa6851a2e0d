"""Malformed specs and flags, tried as a skeptical user would (issue 20): `tenter plan` and
`tenter run` each refuse every one with exit 2, a short message naming the field, no
traceback, nothing written and nothing started, in bounded time and memory."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import own_children, tenter

BASE = "entry_point: train.py\n"
"""The valid part of every spec below: each case adds one bad thing."""
MEMORY_LIMIT = 512 * 2**20
"""Address space of each `tenter` run: the CLI takes ~50 MB; the runaways of issue 20 took
gigabytes, and fail here with a MemoryError traceback instead."""
MESSAGE_LIMIT = 6_000
"""Characters of stderr: the capped report (10 problems of <= 500 characters), plus rich's
markup."""


def alias_bomb(levels: int) -> str:
    """A YAML list of 9**(levels + 1) items, written in a few hundred bytes."""
    text = "&a0 [" + ", ".join(["x"] * 9) + "]"
    for level in range(1, levels + 1):
        text = f"&a{level} [{text}, " + ", ".join([f"*a{level - 1}"] * 8) + "]"
    return text


@dataclass(frozen=True)
class BadInput:
    name: str
    field: str
    """What the message must name: the field (or the file, for a file that is no YAML)."""
    spec: str | bytes = BASE
    flags: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    """More text the message must hold."""


CASES = [
    BadInput("binary file", "is not UTF-8 text", bytes(range(256)) * 4),
    BadInput("latin-1 file", "is not UTF-8 text", (BASE + "name: caf\xe9\n").encode("latin-1")),
    BadInput("environment key with =", "environment.'A=B'", BASE + "environment: {A=B: '1'}\n"),
    BadInput("empty environment key", "environment.''", BASE + "environment: {'': '1'}\n"),
    BadInput("NUL in environment", "environment.A", BASE + 'environment: {A: "x\\0y"}\n'),
    BadInput(
        "NUL in hyperparameter", "hyperparameters.lr", BASE + 'hyperparameters: {lr: "1\\0"}\n'
    ),
    BadInput(
        "5 MB hyperparameter",
        "hyperparameters.big",
        BASE + f"hyperparameters: {{big: {'x' * 5_000_000}}}\n",
    ),
    BadInput("5 MB args", "args.0", BASE + f"args: [{'x' * 5_000_000}]\n"),
    BadInput(
        "args over ARG_MAX's share", "args", BASE + f"args: [{', '.join(['y' * 16_000] * 20)}]\n"
    ),
    BadInput(
        "environment over ARG_MAX's share",
        "environment",
        BASE + "environment:\n" + "".join(f"  V{i}: {'z' * 16_000}\n" for i in range(20)),
    ),
    BadInput(
        "hyperparameters over SM_TRAINING_ENV's share",
        "hyperparameters",
        BASE + "hyperparameters:\n" + "".join(f"  h{i}: {'z' * 16_000}\n" for i in range(3)),
    ),
    BadInput(
        "lists nested 5,000 deep",
        "hyperparameters.deep",
        BASE + f"hyperparameters: {{deep: {'[' * 5000}{']' * 5000}}}\n",
    ),
    BadInput(
        "self-nested YAML alias",
        "hyperparameters.loop",
        BASE + "hyperparameters: {loop: &l [*l]}\n",
    ),
    BadInput("--hosts 10000", "instance_count", flags=("--hosts", "10000")),
    BadInput(
        "--hosts 200 on the local backend", "the local backend simulates", flags=("--hosts", "200")
    ),
    BadInput("--procs-per-host 10000", "processes_per_host", flags=("--procs-per-host", "10000")),
    BadInput("huge instance_count", "instance_count", BASE + "instance_count: " + "9" * 23 + "\n"),
    BadInput(
        "integer over 4,300 digits",
        "holds a value tenter cannot read",
        BASE + "max_run: " + "9" * 5000 + "\n",
    ),
    BadInput("max_run over 28 days", "max_run", BASE + "max_run: 99999999999\n"),
    BadInput(
        "alias bomb in instance_count",
        "instance_count",
        BASE + f"instance_count: {alias_bomb(6)}\n",
    ),
    BadInput(
        "alias bomb in hyperparameters",
        "hyperparameters.x",
        BASE + f"hyperparameters: {{x: {alias_bomb(6)}}}\n",
    ),
    BadInput(
        "alias bomb in environment",
        "environment.A",
        BASE + f"environment: {{A: {alias_bomb(6)}}}\n",
    ),
    BadInput(
        "instance_count: true",
        "instance_count: True is not a valid integer",
        BASE + "instance_count: true\n",
    ),
    BadInput(
        "duplicate key",
        "instance_count: is given twice (lines 2 and 3)",
        BASE + "instance_count: 1\ninstance_count: 2\n",
    ),
    BadInput(
        "duplicate nested key",
        "A: is given twice",
        BASE + "environment:\n  A: '1'\n  A: '2'\n",
    ),
    BadInput(
        "hosts and instance_count",
        "hosts: is another name for instance_count, and both are set (hosts: 2, instance_count: 3)",
        BASE + "hosts: 2\ninstance_count: 3\n",
    ),
    BadInput(
        "YAML boolean in environment",
        "environment.NCCL_IB_DISABLE: True is a YAML boolean",
        BASE + "environment: {NCCL_IB_DISABLE: on}\n",
    ),
    BadInput(
        "300,000 unknown keys",
        "makes the spec hold more than 100,000 values",
        BASE + "".join(f"k{i}: 1\n" for i in range(300_000)),
    ),
    BadInput(
        "20,000 unknown keys",
        "k0: unknown field",
        BASE + "".join(f"k{i}: 1\n" for i in range(20_000)),
        extra=("and 19,990 more",),
    ),
    BadInput(
        "negative preemption grace",
        "checkpoint.preemption_grace: -1 is not greater than or equal to 0",
        BASE + "checkpoint: {preemption_grace: -1}\n",
    ),
    BadInput(
        "preemption grace with a unit",
        "checkpoint.preemption_grace: '30s' is not a valid integer",
        BASE + "checkpoint: {preemption_grace: 30s}\n",
    ),
    BadInput(
        "straggler ratio not above 1",
        "stragglers.ratio: 0.9 is not greater than 1",
        BASE + "stragglers: {ratio: 0.9}\n",
    ),
    BadInput(
        "straggler field misspelt",
        "stragglers.windw: unknown field. Fix: rename it to 'window'",
        BASE + "stragglers: {windw: 5}\n",
    ),
    BadInput("spec file over 8 MiB", "is larger than 8 MiB", BASE + "# " + "x" * 9 * 2**20 + "\n"),
]


def commands(case: BadInput, spec: Path, out: Path) -> list[list[str]]:
    job = [str(spec), "--output-dir", str(out), *case.flags]
    return [["plan", *job], ["run", *job, "--skip-preflight"]]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_exits_2_naming_the_field_and_creates_nothing(
    case: BadInput, tmp_path: Path
) -> None:
    (tmp_path / "train.py").write_text("print('ran')\n")
    spec = tmp_path / "job.yaml"
    spec.write_bytes(case.spec.encode() if isinstance(case.spec, str) else case.spec)
    out = tmp_path / "out"
    for argv in commands(case, spec, out):
        result = tenter(*argv, timeout=60, max_memory=MEMORY_LIMIT)
        assert result.returncode == 2, (argv[0], result.stderr[-2000:])
        assert "Traceback" not in result.stderr
        message = " ".join(result.stderr.split())  # rich may wrap; the text is what counts
        for expected in (case.field, *case.extra):
            assert expected in message, (argv[0], message[:2000])
        assert "Fix: " in message, message[:2000]  # every problem says how to fix it
        assert len(result.stderr) < MESSAGE_LIMIT
        assert result.stdout == ""
        assert not (Path(os.environ["TENTER_HOME"]) / "jobs").exists()
        assert not out.exists()
        assert own_children() == []
