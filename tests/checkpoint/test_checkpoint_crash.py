"""A saver killed (SIGKILL) at each point of the commit leaves the previous checkpoint
loadable, the manifest pointing to it, and nothing that the next run trips over."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from tenter.checkpoint import Checkpointer
from tests.conftest import REPO

SCRIPT = Path(__file__).parent / "scripts" / "crash_during_save.py"
# What each point leaves on disk besides the manifest and step 1: the proof that the
# saver died where it was meant to.
LEFT = {
    "written": [".tmp-step-00000002"],  # complete, not yet renamed
    "renamed": ["step-00000002"],  # renamed, not yet in the manifest
    "manifest": [".tmp-manifest.json.", "step-00000002"],  # the new manifest, not renamed
}


def model_of(value: float) -> nn.Linear:
    model = nn.Linear(4, 2)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(value)
    return model


@pytest.fixture(scope="module")
def crashed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, int]]:
    """For each point, a checkpoint folder with step 1, whose saver of step 2 was killed at
    that point. The savers run at once: starting Python with torch is the slow part."""
    savers = {}
    try:
        for point in LEFT:
            root = tmp_path_factory.mktemp(point) / "ckpt"
            Checkpointer(model_of(1.0), dir=root).save(1)
            savers[point] = (
                root,
                subprocess.Popen(
                    [sys.executable, str(SCRIPT), str(root), point],
                    cwd=REPO,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                ),
            )
        return {point: (root, saver.wait(timeout=120)) for point, (root, saver) in savers.items()}
    finally:
        for _, saver in savers.values():
            saver.kill()  # a no-op for the exited ones
            saver.wait(timeout=60)
            assert saver.stderr is not None
            saver.stderr.close()


@pytest.mark.parametrize("point", list(LEFT))
def test_previous_checkpoint_survives_if_the_saver_is_killed_during_a_save(
    crashed: dict[str, tuple[Path, int]], point: str
) -> None:
    root, returncode = crashed[point]
    assert returncode == -signal.SIGKILL
    assert json.loads((root / "manifest.json").read_text())["latest"] == "step-00000001"
    left = sorted(
        p.name for p in root.iterdir() if p.name not in {"manifest.json", "step-00000001"}
    )
    assert len(left) == len(LEFT[point]), left
    assert all(name.startswith(prefix) for name, prefix in zip(left, LEFT[point], strict=True)), (
        left
    )

    model = model_of(0.0)
    ckpt = Checkpointer(model, dir=root)
    assert ckpt.resume() == 1
    assert all(torch.equal(p, torch.ones_like(p)) for p in model.parameters())
    # The next run saves step 2 again, over whatever the crash left.
    ckpt.save(2)
    assert sorted(p.name for p in root.iterdir()) == [
        "manifest.json",
        "step-00000001",
        "step-00000002",
    ]
    assert Checkpointer(model_of(0.0), dir=root).resume() == 2
