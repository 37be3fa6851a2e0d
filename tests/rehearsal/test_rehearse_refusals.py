"""``tenter rehearse``'s refusals: exit 2, the flag named, nothing created."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import REPO, tenter

SPEC = str(REPO / "examples" / "digits" / "job.yaml")


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--backend", "kubernetes"], "argument --backend: invalid choice: 'kubernetes'"),
        (["--steady-s", "-1"], "error: --steady-s: -1 is negative"),
    ],
    ids=["backend", "steady-s"],
)
def test_a_bad_flag_is_refused_before_anything_runs(
    tenter_home: Path, flags: list[str], said: str
) -> None:
    done = tenter("rehearse", SPEC, "--hosts", "2", *flags)
    assert done.returncode == 2, done.stderr
    assert said in done.stderr
    assert not (tenter_home / "jobs").exists()
