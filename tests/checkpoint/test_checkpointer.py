"""The Checkpointer in one process: what it restores, what it keeps, how it fails."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import numpy
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from tenter.checkpoint import (
    Checkpointer,
    CheckpointError,
    CheckpointMismatchError,
    ResumableSampler,
    default_dir,
)
from tenter.jobdir.events import read_events
from tests.conftest import fill


class Run:
    """A tiny training run: model with dropout, Adam, a step schedule, a shuffled loader."""

    def __init__(self, seed: int) -> None:
        torch.manual_seed(seed)
        self.model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2))
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=0.01)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=2)
        g = torch.Generator().manual_seed(0)
        data = TensorDataset(
            torch.randn(20, 4, generator=g), torch.randn(20, 2, generator=g), torch.arange(20)
        )
        self.sampler = ResumableSampler(DistributedSampler(data, num_replicas=1, rank=0))
        # Its own generator: starting an epoch then leaves the global RNG (dropout's) alone.
        self.loader = DataLoader(
            data, batch_size=4, sampler=self.sampler, generator=torch.Generator()
        )
        self.batches = iter(self.loader)

    def checkpointer(self, path: Path, **kwargs: Any) -> Checkpointer:
        return Checkpointer(
            self.model, self.optimizer, self.scheduler, sampler=self.sampler, dir=path, **kwargs
        )

    def train(self, steps: int) -> list[int]:
        """Train on the next batches; return the indices of the samples seen."""
        seen = []
        for _ in range(steps):
            x, y, index = next(self.batches)
            seen += index.tolist()
            self.optimizer.zero_grad()
            nn.functional.mse_loss(self.model(x), y).backward()
            self.optimizer.step()
            self.scheduler.step()
        return seen

    def params(self) -> list[torch.Tensor]:
        return [p.detach().clone() for p in self.model.parameters()]


def draws() -> tuple[float, float, torch.Tensor]:
    return random.random(), float(numpy.random.rand()), torch.rand(3)


def test_resume_returns_0_and_changes_nothing_if_there_is_no_checkpoint(tmp_path: Path) -> None:
    run = Run(seed=0)
    before = run.params()
    assert run.checkpointer(tmp_path / "ckpt").resume() == 0
    assert all(torch.equal(a, b) for a, b in zip(before, run.params(), strict=True))


def test_resume_restores_every_component_bit_exactly(tmp_path: Path) -> None:
    run = Run(seed=0)
    run.train(2)
    extras: dict[str, Any] = {"best_loss": 0.25, "ema": nn.Linear(2, 2)}
    ckpt = run.checkpointer(tmp_path / "ckpt", extras=extras)
    ckpt.save(2)
    saved = run.params()
    saved_ema = extras["ema"].weight.detach().clone()
    next_draws = draws()

    other = Run(seed=1)  # other weights, fresh optimizer, scheduler and sampler
    restored_extras: dict[str, Any] = {"ema": nn.Linear(2, 2)}
    assert other.checkpointer(tmp_path / "ckpt", extras=restored_extras).resume() == 2
    assert all(torch.equal(a, b) for a, b in zip(other.params(), saved, strict=True))
    assert restored_extras["best_loss"] == 0.25
    assert torch.equal(restored_extras["ema"].weight, saved_ema)
    assert other.scheduler.last_epoch == 2
    assert other.sampler.state_dict() == {"epoch": 0, "position": 8, "num_replicas": 1}
    # Python, numpy and torch continue with the numbers that followed the save.
    python, np, pt = draws()
    assert (python, np) == next_draws[:2]
    assert torch.equal(pt, next_draws[2])


def test_training_resumed_mid_epoch_continues_exactly(tmp_path: Path) -> None:
    run = Run(seed=0)
    run.train(2)
    run.checkpointer(tmp_path / "ckpt").save(2)
    expected = run.train(2), run.params(), run.optimizer.state_dict()

    other = Run(seed=1)
    other.checkpointer(tmp_path / "ckpt").resume()
    other.batches = iter(other.loader)  # a new epoch loop over the restored sampler
    seen, params, optimizer = other.train(2), other.params(), other.optimizer.state_dict()
    assert seen == expected[0]  # the same samples, in the same order, dropout too:
    assert all(torch.equal(a, b) for a, b in zip(params, expected[1], strict=True))
    for index, state in optimizer["state"].items():
        for key, value in state.items():
            assert torch.equal(value, expected[2]["state"][index][key]), key


def test_save_keeps_the_newest_checkpoints_and_the_manifest_lists_them(ckpt_dir: Path) -> None:
    run = Run(seed=0)
    ckpt = run.checkpointer(ckpt_dir, every=2, keep=2)
    saved = [step for step in range(1, 8) if ckpt.maybe_save(step)]
    assert saved == [2, 4, 6]
    assert sorted(p.name for p in ckpt_dir.iterdir()) == [
        "manifest.json",
        "step-00000004",
        "step-00000006",
    ]
    manifest = json.loads((ckpt_dir / "manifest.json").read_text())
    assert manifest == {
        "format": 1,
        "latest": "step-00000006",
        "checkpoints": [
            {"name": "step-00000004", "step": 4, "world_size": 1, "sharded": False},
            {"name": "step-00000006", "step": 6, "world_size": 1, "sharded": False},
        ],
    }
    assert run.checkpointer(ckpt_dir).resume() == 6


def test_save_does_nothing_if_the_step_was_just_resumed(ckpt_dir: Path) -> None:
    run = Run(seed=0)
    run.checkpointer(ckpt_dir).save(4)
    before = (ckpt_dir / "step-00000004" / "state.pt").stat().st_mtime_ns
    ckpt = run.checkpointer(ckpt_dir)
    assert ckpt.resume() == 4
    ckpt.save(4)
    assert (ckpt_dir / "step-00000004" / "state.pt").stat().st_mtime_ns == before


def test_save_replaces_a_listed_step_if_a_run_started_over_without_resume(
    ckpt_dir: Path,
) -> None:
    first = Run(seed=0)
    ckpt = first.checkpointer(ckpt_dir)
    ckpt.save(2)
    ckpt.save(4)
    again = Run(seed=1)
    again.checkpointer(ckpt_dir).save(2)
    manifest = json.loads((ckpt_dir / "manifest.json").read_text())
    assert [e["step"] for e in manifest["checkpoints"]] == [4, 2]
    resumed = Run(seed=2)
    assert resumed.checkpointer(ckpt_dir).resume() == 2
    assert all(torch.equal(a, b) for a, b in zip(resumed.params(), again.params(), strict=True))


def test_async_save_writes_the_state_at_the_time_of_the_call(ckpt_dir: Path) -> None:
    run = Run(seed=0)
    ckpt = run.checkpointer(ckpt_dir, async_save=True)
    ckpt.save(1)
    saved = run.params()
    run.train(2)  # changes the parameters in place, maybe while the save is written
    ckpt.close()
    other = Run(seed=1)
    assert other.checkpointer(ckpt_dir).resume() == 1
    assert all(torch.equal(a, b) for a, b in zip(other.params(), saved, strict=True))


def test_wait_raises_if_the_async_save_failed_and_keeps_the_previous(ckpt_dir: Path) -> None:
    run = Run(seed=0)
    extras: dict[str, Any] = {}
    ckpt = run.checkpointer(ckpt_dir, async_save=True, extras=extras)
    ckpt.save(1)
    extras["callback"] = lambda: None  # torch.save cannot pickle a lambda
    ckpt.save(2)
    with pytest.raises(CheckpointError, match=r"^the save of step 2 to \S+ failed: rank 0: "):
        ckpt.wait()
    ckpt.close()
    assert json.loads((ckpt_dir / "manifest.json").read_text())["latest"] == "step-00000001"


def test_a_save_without_space_is_skipped_until_too_many_fail_in_a_row(
    small_disk: Path,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("TENTER_JOB_DIR", str(tmp_path))
    run = Run(seed=0)
    ckpt = run.checkpointer(small_disk, max_failed_saves=1)
    ckpt.save(1)
    fill(small_disk / "filler")
    assert ckpt.save(2) is None
    listed = ["filler", "manifest.json", "step-00000001"]
    assert sorted(p.name for p in small_disk.iterdir()) == listed  # its partial files gone
    (line,) = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert re.fullmatch(
        rf"the checkpoint of step 2 in {small_disk} is skipped for lack of space \(rank 0: "
        r"OSError: \[Errno 28\] "
        rf"No space left on device: '{small_disk}/\S+' \(\d+ bytes free\)\); training goes "
        r"on \(the latest is still step-00000001; 1 of max_failed_saves=1 failed in a row\)",
        line,
    )
    (event,) = [e for e in read_events(tmp_path) if e["event"] == "checkpoint_skipped"]
    assert (event["step"], event["latest"], list(event["failed"])) == (2, 1, ["0"])
    (small_disk / "filler").unlink()  # space comes back: saves succeed, the count restarts
    assert ckpt.save(3) == small_disk / "step-00000003"
    fill(small_disk / "filler")
    assert ckpt.save(4) is None
    with pytest.raises(CheckpointError, match=r"for lack of space, 2 saves in a row \(more th"):
        ckpt.save(5)
    resumed = Run(seed=1)
    (small_disk / "filler").unlink()
    assert resumed.checkpointer(small_disk).resume() == 3


def test_an_asynchronous_save_without_space_is_skipped_at_wait(small_disk: Path) -> None:
    run = Run(seed=0)
    ckpt = run.checkpointer(small_disk, async_save=True)
    ckpt.save(1)
    ckpt.wait()
    fill(small_disk / "filler")
    ckpt.save(2)  # its own file fits or not: either way, the save is skipped by wait()
    ckpt.close()
    listed = ["filler", "manifest.json", "step-00000001"]
    assert sorted(p.name for p in small_disk.iterdir()) == listed


def test_construction_removes_what_crashed_saves_left(ckpt_dir: Path) -> None:
    run = Run(seed=0)
    run.checkpointer(ckpt_dir).save(1)
    (ckpt_dir / ".tmp-step-00000002").mkdir()
    (ckpt_dir / ".tmp-step-00000002" / "rank-0.pt").write_bytes(b"partial")
    (ckpt_dir / "step-00000003").mkdir()  # renamed, but never listed in the manifest
    (ckpt_dir / ".tmp-manifest.json.123").write_text("{")
    run.checkpointer(ckpt_dir)
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["manifest.json", "step-00000001"]


def test_construction_names_the_path_if_the_directory_is_not_writable(tmp_path: Path) -> None:
    # A directory under a regular file cannot be created even by root (CI runs as root,
    # which a chmod-ed directory would not stop).
    (tmp_path / "file").write_text("")
    target = tmp_path / "file" / "ckpt"
    with pytest.raises(CheckpointError) as raised:
        Run(seed=0).checkpointer(target)
    assert re.fullmatch(
        rf"the checkpoint directory {re.escape(str(target))} is not writable \(.+\); pass "
        r"Checkpointer\(dir=\.\.\.\) a writable directory that every host can reach",
        str(raised.value),
    )


# DCP says that it saves from one process when there is no process group: as intended here.
SINGLE_PROCESS_DCP = pytest.mark.filterwarnings("ignore:torch.distributed is disabled")


@SINGLE_PROCESS_DCP
@pytest.mark.parametrize("sharded", [False, True])
def test_resume_names_the_mismatching_keys_if_the_model_has_another_shape(
    ckpt_dir: Path, sharded: bool
) -> None:
    torch.manual_seed(0)
    saved = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    Checkpointer(saved, dir=ckpt_dir, sharded=sharded).save(1)
    other = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2), nn.Linear(2, 2))
    with pytest.raises(CheckpointMismatchError) as raised:
        Checkpointer(other, dir=ckpt_dir, sharded=sharded).resume()
    assert str(raised.value) == (
        f"checkpoint {ckpt_dir / 'step-00000001'} does not fit the model:\n"
        "  missing in the checkpoint: 3.bias, 3.weight\n"
        "  different shapes: 0.bias (checkpoint [8], model [16]), "
        "0.weight (checkpoint [8, 4], model [16, 4]), "
        "2.weight (checkpoint [2, 8], model [2, 16])\n"
        "Resume with the model the checkpoint was saved from, or use a new dir."
    )
    assert raised.value.missing == ["3.bias", "3.weight"]
    assert raised.value.unexpected == []
    assert raised.value.shapes["0.weight"] == ((8, 4), (16, 4))


@SINGLE_PROCESS_DCP
def test_resume_names_the_fix_if_the_checkpoint_was_saved_sharded(ckpt_dir: Path) -> None:
    model = nn.Linear(2, 2)
    Checkpointer(model, dir=ckpt_dir, sharded=True).save(1)
    with pytest.raises(CheckpointError, match=r"pass Checkpointer\(sharded=True\)"):
        Checkpointer(model, dir=ckpt_dir).resume()


def test_default_dir_is_the_job_spec_s_checkpoint_dir_if_run_by_tenter(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TENTER_JOB_DIR", raising=False)
    monkeypatch.delenv("TENTER_CHECKPOINT_DIR", raising=False)
    assert default_dir() == Path("checkpoints")
    monkeypatch.setenv("TENTER_JOB_DIR", str(tmp_path / "job"))
    assert default_dir() == tmp_path / "job" / "checkpoints"
    # `tenter run` sets it for every worker, from the spec's checkpoint.dir.
    monkeypatch.setenv("TENTER_CHECKPOINT_DIR", str(tmp_path / "shared"))
    assert default_dir() == tmp_path / "shared"


def test_every_and_keep_default_to_the_job_spec_s_if_not_passed(
    monkeypatch: pytest.MonkeyPatch, ckpt_dir: Path
) -> None:
    monkeypatch.setenv("TENTER_CHECKPOINT_EVERY", "2")
    monkeypatch.setenv("TENTER_CHECKPOINT_KEEP", "1")
    ckpt = Checkpointer(nn.Linear(2, 2), dir=ckpt_dir)
    assert [ckpt.maybe_save(step) for step in (1, 2, 3, 4)] == [False, True, False, True]
    listed = json.loads((ckpt_dir / "manifest.json").read_text())["checkpoints"]
    assert [c["step"] for c in listed] == [4]
    explicit = Checkpointer(nn.Linear(2, 2), dir=ckpt_dir, every=3, keep=2)
    assert (explicit.every, explicit.keep) == (3, 2)
    monkeypatch.delenv("TENTER_CHECKPOINT_EVERY")
    monkeypatch.delenv("TENTER_CHECKPOINT_KEEP")
    fallback = Checkpointer(nn.Linear(2, 2), dir=ckpt_dir)
    assert (fallback.every, fallback.keep) == (None, 3)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        (
            "TENTER_CHECKPOINT_EVERY",
            "ten",
            "TENTER_CHECKPOINT_EVERY='ten' is not a whole number of at least 1 (the "
            "Checkpointer's default every, from the job spec's checkpoint.every); fix or unset "
            "it, or pass Checkpointer(every=N)",
        ),
        (
            "TENTER_CHECKPOINT_KEEP",
            "0",
            "TENTER_CHECKPOINT_KEEP='0' is not a whole number of at least 1 (the "
            "Checkpointer's default keep, from the job spec's checkpoint.keep); fix or unset "
            "it, or pass Checkpointer(keep=N)",
        ),
    ],
)
def test_constructor_names_the_variable_if_its_default_from_the_environment_is_malformed(
    monkeypatch: pytest.MonkeyPatch, ckpt_dir: Path, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        Checkpointer(nn.Linear(2, 2), dir=ckpt_dir)


def test_constructor_rejects_a_nonsense_interval_keep_or_max_failed_saves(
    monkeypatch: pytest.MonkeyPatch, ckpt_dir: Path
) -> None:
    monkeypatch.delenv("TENTER_CHECKPOINT_EVERY", raising=False)
    model = nn.Linear(2, 2)
    with pytest.raises(ValueError, match=r"^every=0: the save interval must be at least 1"):
        Checkpointer(model, dir=ckpt_dir, every=0)
    with pytest.raises(ValueError, match=r"^keep=0: at least the latest checkpoint"):
        Checkpointer(model, dir=ckpt_dir, keep=0)
    with pytest.raises(ValueError, match=r"maybe_save\(\) needs the interval"):
        Checkpointer(model, dir=ckpt_dir).maybe_save(1)
    with pytest.raises(ValueError, match=r"^max_failed_saves=-1: how many saves in a row may"):
        Checkpointer(model, dir=ckpt_dir, max_failed_saves=-1)


@pytest.fixture
def ckpt_dir(tmp_path: Path) -> Path:
    return tmp_path / "ckpt"


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:-100])


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (flip_a_byte, "state.pt differs from what was written"),
        (truncate, "state.pt is truncated: "),
    ],
)
def test_resume_skips_a_damaged_newest_checkpoint_saying_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, damage: Any, said: str
) -> None:
    run = Run(seed=0)
    ckpt = run.checkpointer(tmp_path / "ckpt")
    run.train(2)
    ckpt.save(2)
    saved = run.params()
    run.train(2)
    ckpt.save(4)
    damage(tmp_path / "ckpt" / "step-00000004" / "state.pt")
    other = Run(seed=1)
    assert other.checkpointer(tmp_path / "ckpt").resume() == 2
    assert all(torch.equal(a, b) for a, b in zip(other.params(), saved, strict=True))
    (warning,) = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert warning.startswith(f"checkpoint {tmp_path / 'ckpt' / 'step-00000004'} is damaged: ")
    assert said in warning
    assert warning.endswith("; resuming from step-00000002 instead")
