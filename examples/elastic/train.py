"""Fault-tolerant data-parallel training: checkpoints, and an exact resume after a crash.

A small MLP learns a synthetic regression (no dataset to download, nothing to import but
torch), deterministically, checkpointed with ``tenter.checkpoint``. Kill any worker at any
time; when the job restarts (``max_restarts``) or is run again, it continues from the last
checkpoint, and the final model is bit for bit the one an uninterrupted run produces. A
preemption (SIGTERM to ``tenter run``, ``tenter cancel --preempt``, Slurm's scancel) stops
every rank at the same step after a final checkpoint; running the job again resumes there:

    tenter run --hosts 2 --procs-per-host 2 examples/elastic/train.py -- --epochs 3
    python examples/elastic/train.py --checkpoint_dir /tmp/ckpt     # one process

What makes the resume exact:

- the Checkpointer restores model, optimizer, LR schedule and every rank's RNG states;
- the ResumableSampler restores the epoch and the position within it, so that a run resumed
  mid-epoch skips the batches already trained on and sees the rest in the same order;
- deterministic kernels, and a DataLoader with its own generator (see below);
- gradients averaged one by one, whatever DDP's bucket layout (see below).

The final parameters go to ``$SM_MODEL_DIR/model.pt`` (rank 0).
"""

import argparse
import gc
import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

import tenter
import tenter.parallel
from tenter.checkpoint import Checkpointer, ResumableSampler
from tenter.parallel.data_parallel import apply_fsdp


def dataset(seed: int, size: int = 1024, features: int = 16) -> TensorDataset:
    """y = sin(x @ w) + noise; the same on every rank, from the seed."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(size, features, generator=g)
    w = torch.randn(features, 1, generator=g) / features**0.5
    return TensorDataset(x, torch.sin(x @ w) + 0.05 * torch.randn(size, 1, generator=g))


def per_rank_batch_size(global_batch_size: int) -> int:
    """The global batch split evenly over the ranks; a world it does not divide (an elastic
    job that grew to 3 hosts x 2 processes: 64 / 6) trains with the nearest even split, said
    once, rather than fail at every restart."""
    world = tenter.world_size()
    per_rank = max(1, round(global_batch_size / world))
    if per_rank * world != global_batch_size:
        tenter.print0(
            f"global batch {per_rank * world} ({per_rank} per rank x {world} ranks): "
            f"--batch_size {global_batch_size} does not divide by {world} ranks",
            flush=True,
        )
    return per_rank


def all_reduce_each_gradient(
    group: dist.ProcessGroup | None, bucket: dist.GradBucket
) -> torch.futures.Future[torch.Tensor]:
    """DDP's communication hook: the mean of each gradient, all-reduced on its own. DDP's
    default all-reduces a whole bucket (a flattened run of gradients), and reorders the
    gradients in it after each process's first step: with more than two ranks the sums of
    the moved elements are then grouped differently, and the first step after a resume
    would differ in the last bits from the uninterrupted run's (docs/checkpoint.md, "Exact
    resume"). Each gradient alone sums the same wherever it lies in the bucket. For speed
    over exactness, leave the hook out: one all-reduce per bucket."""
    world = dist.get_world_size(group)
    works = [dist.all_reduce(g, group=group, async_op=True) for g in bucket.gradients()]
    summed = torch.futures.collect_all([work.get_future() for work in works])

    def mean(done: torch.futures.Future[list[torch.futures.Future[Any]]]) -> torch.Tensor:
        for work in done.value():
            work.value()  # a failed all-reduce (a peer died) raises here, failing the step
        return bucket.buffer().div_(world)

    return summed.then(mean)


def data_parallel(module: nn.Module, fsdp: bool) -> nn.Module:
    """``module`` replicated on every rank (DDP, exact: see :func:`all_reduce_each_gradient`)
    or, with ``fsdp``, sharded over all ranks (FSDP2, tenter.parallel's helpers: each
    gradient reduce-scattered, the same sums wherever the job resumes)."""
    if fsdp:
        apply_fsdp(module, tenter.parallel.mesh(dp_shard=tenter.world_size()), pipelined=False)
        return module
    model = DistributedDataParallel(module)
    model.register_comm_hook(None, all_reduce_each_gradient)
    return model


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument(
        "--batch_size", type=int, default=64, help="global batch size (the nearest that divides)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--checkpoint_every", type=int, help="steps (default: the spec's checkpoint.every, or 10)"
    )
    parser.add_argument(
        "--keep", type=int, help="checkpoints kept (default: the spec's checkpoint.keep, or 3)"
    )
    parser.add_argument("--checkpoint_dir", default=None, help="default: the job's")
    parser.add_argument("--async_save", action="store_true", help="save in the background")
    parser.add_argument(
        "--fsdp", action="store_true", help="shard the model over the ranks (FSDP2), not DDP"
    )
    return parser.parse_args()


def train(args: argparse.Namespace) -> None:
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(args.seed)  # the same initial weights and dropout masks on every rank
    data = dataset(args.seed)
    sampler = ResumableSampler(tenter.sampler(data, shuffle=True, seed=args.seed))
    loader = DataLoader(
        data,
        batch_size=per_rank_batch_size(args.batch_size),
        sampler=sampler,
        # Starting an epoch draws a seed from this generator. Without one it draws from
        # torch's global RNG, the one dropout uses, and a run resumed mid-epoch (which starts
        # its iterator after the restore) would be one draw off from then on.
        generator=torch.Generator(),
    )
    model = data_parallel(
        nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Dropout(0.1), nn.Linear(64, 1)), args.fsdp
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(
        optimizer, T_max=args.epochs * len(loader)
    )
    loss_fn = nn.MSELoss()

    every = args.checkpoint_every
    if every is None and "TENTER_CHECKPOINT_EVERY" not in os.environ:
        every = 10  # else the Checkpointer takes the job spec's checkpoint.every
    ckpt = Checkpointer(
        model,
        optimizer,
        scheduler,
        sampler=sampler,
        dir=args.checkpoint_dir,
        every=every,
        keep=args.keep,
        async_save=args.async_save,
    )
    step = ckpt.resume()
    tenter.print0(
        f"resumed at step {step} (epoch {sampler.epoch + 1}) from {ckpt.dir}"
        if step
        else f"starting; checkpoints every {ckpt.every} steps in {ckpt.dir}",
        flush=True,
    )
    for epoch in range(sampler.epoch, args.epochs):
        sampler.set_epoch(epoch)  # keeps the restored position in the resumed epoch
        total = torch.zeros(2)
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            total += torch.tensor([loss.item() * len(y), len(y)])
            if ckpt.maybe_save(step):
                verb = "saved" if ckpt.preempted or not args.async_save else "saving"
                tenter.print0(f"{verb} checkpoint at step {step}", flush=True)
            if ckpt.preempted:
                break
        if ckpt.preempted:
            tenter.print0(f"preempted at step {step}: stopping", flush=True)
            break
        dist.all_reduce(total)
        if total[1]:  # zero when resumed right at the end of this epoch
            tenter.print0(f"epoch {epoch + 1}  step {step}  loss {total[0] / total[1]:.4f}")
    ckpt.close()

    full_state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
    if tenter.is_main() and not ckpt.preempted:
        model_dir = Path(os.environ.get("SM_MODEL_DIR", "model"))
        model_dir.mkdir(parents=True, exist_ok=True)
        torch.save(full_state, model_dir / "model.pt")
        print(f"done after {step} steps; model saved to {model_dir / 'model.pt'}", flush=True)


def main() -> None:
    args = parse_args()
    tenter.init()
    train(args)
    # DDP keeps its process group in a reference cycle. Left to a later garbage collection,
    # the last reference would go with the GIL held, and the group's destructor can then
    # deadlock with a gloo thread that needs the GIL (pytorch/pytorch#56297): the rank
    # hangs at exit. Collected now, the group is still registered, and
    # destroy_process_group() frees it without the GIL.
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
