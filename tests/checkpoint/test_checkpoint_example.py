"""examples/elastic/train.py, SIGKILLed right after a checkpoint and run again, ends with
exactly the parameters of an uninterrupted run: the resume continues mid-epoch, with the
same batches, dropout masks, momentum and learning rate."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch

from tests.conftest import REPO, WAIT_S, OutputReader

pytestmark = pytest.mark.slow

EXAMPLE = REPO / "examples" / "elastic" / "train.py"


def command(workdir: Path, *args: str) -> tuple[list[str], dict[str, str]]:
    env = {
        **os.environ,
        "SM_MODEL_DIR": str(workdir / "model"),
        "OMP_NUM_THREADS": "1",
        # DDP creates torch's compile cache; `tenter run` puts it here too, not in TMPDIR.
        "TORCHINDUCTOR_CACHE_DIR": str(workdir / "torchinductor"),
    }
    argv = [sys.executable, str(EXAMPLE), "--checkpoint_dir", str(workdir / "ckpt"), *args]
    return argv, env


def final_model(workdir: Path) -> dict[str, torch.Tensor]:
    state: dict[str, torch.Tensor] = torch.load(workdir / "model" / "model.pt")
    return state


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    workdir = tmp_path_factory.mktemp("uninterrupted")
    argv, env = command(workdir)
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return final_model(workdir)


@pytest.mark.parametrize("mode", [[], ["--async_save"]], ids=["sync", "async"])
def test_example_killed_after_a_checkpoint_resumes_to_the_uninterrupted_model(
    tmp_path: Path, uninterrupted: dict[str, torch.Tensor], mode: list[str]
) -> None:
    argv, env = command(tmp_path, *mode)
    run = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True)
    assert run.stdout is not None
    output = OutputReader(run.stdout)
    try:
        deadline = time.monotonic() + WAIT_S
        while (line := output.next_line(deadline)) is not None:
            if re.match(r"(saved|saving) checkpoint at step 20$", line.strip()):
                run.send_signal(signal.SIGKILL)
                break
    except TimeoutError:
        run.kill()  # only then: a run that ended by itself must keep its own status
        raise
    assert run.wait(timeout=60) == -signal.SIGKILL, "".join(output.lines)
    assert not (tmp_path / "model").exists()

    again = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0, again.stderr
    resumed = re.search(r"^resumed at step (\d+) ", again.stdout, re.MULTILINE)
    assert resumed is not None, again.stdout
    # 16 steps an epoch: every checkpoint (10, 20, 30...) is mid-epoch.
    assert int(resumed.group(1)) % 16 != 0
    resumed_model = final_model(tmp_path)
    assert resumed_model.keys() == uninterrupted.keys()
    for key, value in uninterrupted.items():
        assert torch.equal(resumed_model[key], value), key
    assert psutil.Process().children(recursive=True) == []
    assert list(Path(os.environ["TMPDIR"]).iterdir()) == []
