"""Data-parallel ImageNet training: torchvision's ResNet-50 or EfficientNet-B7 on an
ImageFolder tree (``DATA/train/<synset>/*.JPEG``, ``DATA/val/<synset>/*.JPEG``).

    pip install 'tenter[vision]'    # torchvision, built for your torch (see below)
    tenter data imagenet-val-reorg DATA/val LOC_val_solution.csv   # val/ into class folders
    tenter run --hosts 2 --procs-per-host 8 examples/imagenet/imagenet_ddp.py -- DATA \\
        --arch resnet50 --epochs 90 --batch-size 1024 --amp
    # a smoke run on random images, no dataset needed:
    tenter run --hosts 2 --procs-per-host 2 examples/imagenet/imagenet_ddp.py -- --synthetic \\
        --image-size 64 --batch-size 8 --steps-per-epoch 5 --epochs 1

torchvision must match the torch build (a CUDA torch wants the torchvision wheel from the
same index: https://pytorch.org/get-started/locally/); without it the script stops and says
so. In tenter's repository, `make vision` builds .venv-vision, a matching pair beside tenter
(requirements/vision.txt): run `.venv-vision/bin/tenter run ...` there.

``--batch-size`` is global: each rank takes batch / world size. Every step is reported with
``tenter.report``, so ``tenter run`` shows throughput and ETA and ``tenter scale`` can compare
sizes; ``--synthetic`` measures the training step without the input pipeline.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from pathlib import Path
from types import ModuleType

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

import tenter

ARCHS = {"resnet50": 224, "efficientnet_b7": 600}
"""torchvision model name -> the image size it was designed for (the default --image-size)."""
NUM_CLASSES = 1000
Images = Dataset[tuple[torch.Tensor, int]]
Batches = DataLoader[tuple[torch.Tensor, int]]
INSTALL_HINT = (
    "this example needs torchvision, built for the installed torch {torch}: "
    "pip install 'tenter[vision]', or the matching wheel from "
    "https://pytorch.org/get-started/locally/ (a CPU torch: "
    "pip install torchvision --index-url https://download.pytorch.org/whl/cpu; in tenter's "
    "repository: make vision, then .venv-vision/bin/tenter)"
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", nargs="?", help="ImageFolder root holding train/ and val/")
    parser.add_argument("--arch", choices=sorted(ARCHS), default="resnet50")
    parser.add_argument("--epochs", type=int, default=90)
    parser.add_argument("--batch-size", type=int, default=256, help="global batch size")
    parser.add_argument("--lr", type=float, default=0.1, help="for a global batch of 256")
    parser.add_argument("--image-size", type=int, help="default: the arch's own (224, 600)")
    parser.add_argument("--workers", type=int, default=4, help="data loader processes per rank")
    parser.add_argument("--amp", action="store_true", help="bfloat16 autocast on CUDA")
    parser.add_argument("--synthetic", action="store_true", help="random images, no DATA")
    parser.add_argument(
        "--steps-per-epoch", type=int, default=100, help="with --synthetic: steps per epoch"
    )
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.data is None and not args.synthetic:
        parser.error("give DATA (an ImageFolder root with train/ and val/) or --synthetic")
    if args.data is not None and args.synthetic:
        parser.error("--synthetic trains on random images: leave out DATA")
    if args.data is not None:
        missing = [d for d in ("train", "val") if not (Path(args.data) / d).is_dir()]
        if missing:
            parser.error(
                f"DATA {args.data} has no {' or '.join(missing)} folder; for val/, run "
                "`tenter data imagenet-val-reorg DATA/val LOC_val_solution.csv` first"
            )
    for flag in ("epochs", "batch_size", "steps_per_epoch"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')} must be at least 1")
    args.image_size = args.image_size or ARCHS[args.arch]
    return args


def import_torchvision() -> ModuleType:
    try:
        return importlib.import_module("torchvision")
    except ImportError as e:
        # Exit 2, as for any missing input: the job stops before a process group is formed.
        print(f"error: {INSTALL_HINT.format(torch=torch.__version__)} ({e})", file=sys.stderr)
        raise SystemExit(2) from e


class SyntheticImages(Dataset[tuple[torch.Tensor, int]]):
    """Random normalised images and labels, the same for a given index on every rank."""

    def __init__(self, length: int, image_size: int, seed: int) -> None:
        self.length, self.image_size, self.seed = length, image_size, seed

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        image = torch.randn(3, self.image_size, self.image_size, generator=g)
        return image, int(torch.randint(NUM_CLASSES, (), generator=g))


def datasets(args: argparse.Namespace, torchvision: ModuleType) -> tuple[Images, Images]:
    if args.synthetic:
        length = args.steps_per_epoch * args.batch_size
        return (
            SyntheticImages(length, args.image_size, args.seed),
            SyntheticImages(args.batch_size, args.image_size, args.seed + 1),
        )
    t = torchvision.transforms
    normalize = t.Normalize(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    train = torchvision.datasets.ImageFolder(
        str(Path(args.data) / "train"),
        t.Compose(
            [
                t.RandomResizedCrop(args.image_size),
                t.RandomHorizontalFlip(),
                t.ToTensor(),
                normalize,
            ]
        ),
    )
    val = torchvision.datasets.ImageFolder(
        str(Path(args.data) / "val"),
        t.Compose(
            [
                t.Resize(int(args.image_size * 256 / 224)),
                t.CenterCrop(args.image_size),
                t.ToTensor(),
                normalize,
            ]
        ),
    )
    return train, val


def loaders(args: argparse.Namespace, train: Images, val: Images) -> tuple[Batches, Batches]:
    batch = tenter.per_rank_batch_size(args.batch_size)
    workers = 0 if args.synthetic else args.workers  # random tensors need no loader processes
    common = {"batch_size": batch, "num_workers": workers, "pin_memory": torch.cuda.is_available()}
    return (
        DataLoader(train, sampler=tenter.sampler(train, shuffle=True, seed=args.seed), **common),
        DataLoader(val, sampler=tenter.sampler(val, shuffle=False), **common),
    )


def train_epoch(
    model: nn.Module,
    loader: Batches,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
    amp: bool,
    first_step: int,
    total_steps: int,
) -> int:
    """One pass over ``loader``; returns the last step's number."""
    loss_fn = nn.CrossEntropyLoss()
    step = first_step
    for images, labels in loader:
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp):
            loss = loss_fn(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        # .item() waits for the GPU once per step; it is also what makes the step time real.
        tenter.report(step=step, samples=len(labels), loss=loss.item(), total_steps=total_steps)
    return step


def evaluate(model: nn.Module, loader: Batches, device: torch.device) -> float:
    """Top-1 accuracy over the whole validation set (each rank scores its shard)."""
    counts = torch.zeros(2, device=device)
    model.eval()
    with torch.no_grad():
        for images, labels in loader:
            labels = labels.to(device)
            counts[0] += (model(images.to(device)).argmax(dim=1) == labels).sum()
            counts[1] += len(labels)
    model.train()
    dist.all_reduce(counts)
    return (counts[0] / counts[1]).item()


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    torchvision = import_torchvision()
    device = tenter.init()
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    train, val = datasets(args, torchvision)
    train_loader, val_loader = loaders(args, train, val)
    model = getattr(torchvision.models, args.arch)(weights=None, num_classes=NUM_CLASSES)
    model = model.to(device, memory_format=torch.channels_last)
    model = DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None
    )
    lr = args.lr * args.batch_size / 256  # the linear scaling rule (Goyal et al., 2017)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
    total_steps = args.epochs * len(train_loader)
    tenter.print0(
        f"{args.arch} on {tenter.world_size()} ranks, {len(train)} training images"
        f"{' (synthetic)' if args.synthetic else ''}, global batch {args.batch_size}, "
        f"image size {args.image_size}, {total_steps} steps"
    )
    step = 0
    for epoch in range(args.epochs):
        train_loader.sampler.set_epoch(epoch)  # a DistributedSampler (see loaders)
        started = time.perf_counter()
        step = train_epoch(model, train_loader, optimizer, device, args.amp, step, total_steps)
        took = time.perf_counter() - started
        schedule.step()
        accuracy = evaluate(model, val_loader, device)
        tenter.print0(f"epoch {epoch + 1:3d}  {took:.1f} s  top-1 {accuracy:.4f}")
        if tenter.preempted():  # SIGTERM (collective: every rank stops at the same epoch)
            tenter.print0(f"preempted after epoch {epoch + 1}: stopping")
            dist.destroy_process_group()
            return
    if tenter.is_main():
        model_dir = Path(os.environ.get("SM_MODEL_DIR", "model"))
        model_dir.mkdir(parents=True, exist_ok=True)
        torch.save(model.module.state_dict(), model_dir / f"{args.arch}.pt")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
