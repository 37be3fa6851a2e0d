"""Data-parallel training of a small MLP on scikit-learn's bundled digits (8x8 images).

Runs unchanged under `tenter run`, torchrun, or plain `python train.py` (one process):

    tenter run job.yaml                                   # 2 simulated hosts x 2 processes
    tenter run --hosts 2 --procs-per-host 2 train.py -- --epochs 20

The global batch size is fixed: each rank takes global_batch / world_size samples per step,
so the result does not depend on how many hosts run it.
"""

import argparse
import gc
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

import tenter


def datasets(seed: int) -> tuple[TensorDataset, TensorDataset]:
    """The 1797 digits, scaled to [0, 1], split 80/20 the same way on every rank."""
    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32) / 16.0
    y = torch.tensor(y, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(x))
    train, test = order[:cut], order[cut:]
    return TensorDataset(x[train], y[train]), TensorDataset(x[test], y[test])


def evaluate(model: nn.Module, test: TensorDataset) -> float:
    """Accuracy over the whole test set: each rank scores its shard, then one all_reduce."""
    loader = DataLoader(test, batch_size=256, sampler=tenter.sampler(test, shuffle=False))
    counts = torch.zeros(2)
    model.eval()
    with torch.no_grad():
        for x, y in loader:
            counts[0] += (model(x).argmax(dim=1) == y).sum()
            counts[1] += len(y)
    model.train()
    dist.all_reduce(counts)
    return (counts[0] / counts[1]).item()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--batch_size", type=int, default=64, help="global batch size")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    tenter.init()
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    train, test = datasets(args.seed)
    sampler = tenter.sampler(train, shuffle=True, seed=args.seed)
    loader = DataLoader(
        train, batch_size=tenter.per_rank_batch_size(args.batch_size), sampler=sampler
    )

    model = DistributedDataParallel(
        nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()
    tenter.print0(
        f"training on {tenter.world_size()} ranks ({os.environ.get('SM_HOSTS', '1 host')}), "
        f"global batch {args.batch_size}"
    )
    step, total_steps = 0, args.epochs * len(loader)
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        total = torch.zeros(2)
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            step += 1
            step_loss = loss.item()
            total += torch.tensor([step_loss * len(y), len(y)])
            # Progress for the launcher's live view, `tenter report` and `tenter scale`.
            tenter.report(
                step=step, samples=len(y), loss=step_loss, total_steps=total_steps, epoch=epoch + 1
            )
        dist.all_reduce(total)
        accuracy = evaluate(model, test)
        tenter.print0(
            f"epoch {epoch + 1:3d}  loss {total[0] / total[1]:.4f}  test accuracy {accuracy:.4f}"
        )
        if tenter.preempted():  # SIGTERM (collective: every rank stops at the same epoch)
            tenter.print0(f"preempted after epoch {epoch + 1}: stopping")
            return

    if tenter.is_main():
        model_dir = Path(os.environ.get("SM_MODEL_DIR", "model"))
        model_dir.mkdir(parents=True, exist_ok=True)
        torch.save(model.module.state_dict(), model_dir / "model.pt")
        (model_dir / "metrics.json").write_text(json.dumps({"test_accuracy": accuracy}))
        print(f"final test accuracy {accuracy:.4f}; model saved to {model_dir / 'model.pt'}")


if __name__ == "__main__":
    main()
    # DDP holds the process group in a reference cycle; collect it while the group is alive,
    # or the GC may destroy it later under the GIL and deadlock with gloo's threads
    # (pytorch/pytorch#56297).
    gc.collect()
    dist.destroy_process_group()
