"""examples/imagenet/imagenet_ddp.py: its arguments, data and training loop without
torchvision (the real ResNet-50 on 2 ranks: tests/sagemaker_user/test_examples.py, in
.venv-vision)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from tests.conftest import REPO

SCRIPT = REPO / "examples/imagenet/imagenet_ddp.py"


@pytest.fixture(scope="module")
def example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("imagenet_ddp", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_parse_args_uses_the_archs_image_size_if_not_given(example: ModuleType) -> None:
    args = example.parse_args(["--synthetic", "--arch", "efficientnet_b7"])
    assert (args.arch, args.image_size, args.data) == ("efficientnet_b7", 600, None)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([], "give DATA (an ImageFolder root with train/ and val/) or --synthetic"),
        (["--synthetic", "--batch-size", "0"], "--batch-size must be at least 1"),
        (["--synthetic", "--arch", "vgg"], "argument --arch: invalid choice: 'vgg'"),
    ],
)
def test_parse_args_exits_2_naming_the_flag_if_input_is_wrong(
    example: ModuleType, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    with pytest.raises(SystemExit) as exit_:
        example.parse_args(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_parse_args_points_to_the_reorg_if_val_is_flat(
    example: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "train").mkdir()
    with pytest.raises(SystemExit):
        example.parse_args([str(tmp_path)])
    assert "has no val folder; for val/, run `tenter data imagenet-val-reorg" in (
        capsys.readouterr().err
    )


def test_missing_torchvision_exits_2_with_the_install_hint(
    example: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torchvision", None)
    with pytest.raises(SystemExit) as exit_:
        example.import_torchvision()
    assert exit_.value.code == 2
    assert "pip install 'tenter[vision]'" in capsys.readouterr().err


def test_synthetic_images_are_the_same_for_an_index_on_every_rank(example: ModuleType) -> None:
    a, b = example.SyntheticImages(8, 32, seed=0), example.SyntheticImages(8, 32, seed=0)
    image, label = a[5]
    assert image.shape == (3, 32, 32) and 0 <= label < 1000
    assert torch.equal(image, b[5][0]) and label == b[5][1]
    assert not torch.equal(image, a[4][0])


def test_train_epoch_steps_over_synthetic_batches(example: ModuleType) -> None:
    args = example.parse_args(
        ["--synthetic", "--image-size", "8", "--batch-size", "4", "--steps-per-epoch", "3"]
    )
    train, _ = example.datasets(args, torchvision=None)  # synthetic data needs no torchvision
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 8 * 8, 1000))
    before = model[1].weight.detach().clone()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(train, batch_size=4)
    last = example.train_epoch(model, loader, optimizer, torch.device("cpu"), False, 6, 9)
    assert last == 9
    assert not torch.equal(model[1].weight, before)
