"""Per-step fault tolerance with torchft: examples/elastic/train.py in replica groups.

Each replica group (here: one host, one process) trains a full copy of the small MLP;
torchft's Manager averages the gradients of the groups that are up at each step. Kill any
worker: its group restarts (``elastic.max_restarts``) and heals from a live peer at the
current step, while the other groups train on without rolling back:

    tenter run examples/torchft/job.yaml
    # tenter: replica group 1 lost at step 41 (algo-2: a worker failed; restarting the group)
    # tenter: replica group 1 healed at step 44 from group 0

The lines that change from examples/elastic/train.py (see docs/fault_tolerance.md):

1. torchft's Manager instead of torch's DDP, and no ``tenter.init()``: the Manager's own
   process group spans the replica groups and is reconfigured at every step.
2. ``store = ft.group_store()``, then ``manager = Manager(pg=ProcessGroupGloo(), ...,
   **ft.manager_options(timeout=...))`` with the model's state_dict functions, for healing.
3. After ``backward()``, each gradient is averaged with ``manager.allreduce`` (all sent,
   then all waited for), and ``Optimizer(manager, optimizer)`` steps only if the quorum
   committed. Not torchft's ``DistributedDataParallel``: in torchft 0.2 its gradient hook
   crashes the worker when a collective fails (``assert fut._fut`` in ``torchft/ddp.py``),
   as every step shared with a replica group that was just lost does; ``Work.wait()`` of
   ``manager.allreduce`` reports the error to the Manager instead, which then skips the step.
4. ``samples = ft.SampleDealer(manager, len(data), batch_size, seed=...)`` instead of a
   sampler: each step's groups take the next samples of the epoch's global order, which
   moves on only when the step commits and goes to a healing group with its state, so that
   every sample of an epoch is trained on once whichever groups are lost, train alone or
   heal (not torchft's ``DistributedSampler``: a fixed shard per group, whose samples are
   skipped while that group is down). ``samples.indices()`` waits for the step's quorum, so
   it comes after ``zero_grad()``; ``samples.step()`` after the optimizer's.
5. The loop runs until ``manager.current_step()`` reaches the step count (a healed group
   jumps ahead to its peers' step), and calls ``progress.step()`` after each step.
6. No Checkpointer: a restarted group takes its state from a live peer.

The final parameters go to ``$SM_MODEL_DIR/model.pt`` (each group's rank 0): every group
ends with the same model.
"""

import argparse
import os
from datetime import timedelta
from pathlib import Path

import torch
from torch import nn
from torch.utils.data import TensorDataset
from torchft import Manager, Optimizer, ProcessGroupGloo

from tenter.runtime import ft


def dataset(seed: int, size: int = 1024, features: int = 16) -> TensorDataset:
    """y = sin(x @ w) + noise; the same on every rank, from the seed."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(size, features, generator=g)
    w = torch.randn(features, 1, generator=g) / features**0.5
    return TensorDataset(x, torch.sin(x @ w) + 0.05 * torch.randn(size, 1, generator=g))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--batch_size", type=int, default=32, help="per replica group")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="seconds a collective may take (torchft's)"
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if int(os.environ.get("WORLD_SIZE", "1")) != 1:
        raise SystemExit("this example runs one process per replica group (processes_per_host: 1)")
    torch.manual_seed(args.seed)  # the same initial weights in every group
    data = dataset(args.seed)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)

    def state_dict() -> dict[str, object]:
        return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}

    def load_state_dict(state: dict[str, object]) -> None:
        model.load_state_dict(state["model"])  # type: ignore[arg-type]
        optimizer.load_state_dict(state["optimizer"])  # type: ignore[arg-type]

    store = ft.group_store()  # noqa: F841 (kept for the run: the Manager connects to it)
    timeout = timedelta(seconds=args.timeout)
    manager = Manager(
        pg=ProcessGroupGloo(timeout=timeout),
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        **ft.manager_options(timeout=timeout),
    )
    progress = ft.Progress(manager)
    samples = ft.SampleDealer(manager, len(data), batch_size=args.batch_size, seed=args.seed)
    ft_optimizer = Optimizer(manager, optimizer)
    loss_fn = nn.MSELoss()

    while manager.current_step() < args.steps:
        ft_optimizer.zero_grad()  # starts this step's quorum
        x, y = data[samples.indices()]  # this group's share of the step (once the quorum is in)
        loss = loss_fn(model(x), y)
        loss.backward()
        # Averaged across the groups in the quorum; a failed one skips the step.
        works = [manager.allreduce(p.grad) for p in model.parameters() if p.grad is not None]
        for work in works:
            work.wait()
        ft_optimizer.step()  # only if every group of the quorum committed
        samples.step()  # the epoch's position moves on if it did
        progress.step()
        step = manager.current_step()
        if step % 20 == 0:
            print(f"step {step}  loss {loss.item():.4f}  groups {manager.num_participants()}")

    model_dir = Path(os.environ.get("SM_MODEL_DIR", "model"))
    model_dir.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), model_dir / "model.pt")
    print(f"done after {manager.current_step()} steps", flush=True)
    manager.shutdown(wait=False)


if __name__ == "__main__":
    main()
