"""One DDP training loop (gloo, CPU), run by benchmarks/ray_vs_train.py both as Ray Train's
``train_loop_per_worker`` and as tenter's entry point; each checkpoints the way its system
does (Ray Train: ``ray.train.report`` and ``ray.train.get_checkpoint``; tenter:
``tenter.checkpoint.Checkpointer``), the rest is the same code.

Exact whatever the restarts: each step's batch is drawn from (seed, step, rank) alone, the
model has no dropout, a checkpoint holds the model, the optimizer's momentum and the step, and
each gradient is all-reduced on its own (examples/elastic/train.py says why).

What the benchmark reads, from the files its config names: ``steps_file`` (rank 0 appends
``step <step> <wall time>`` after each step), ``kill_file`` (the wall time rank ``kill_rank``
SIGKILLed itself at step ``kill_step``, once: the file's existence says it was done) and
``model_file`` (rank 0's final parameters). Rank 0 also writes ``start <step> <wall time>``
when it starts or restarts, from ``step``.
"""

import gc
import json
import os
import signal
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

CONFIG_ENV = "RAY_DDP_CONFIG"
"""Under tenter: the config (JSON) that Ray Train passes as ``train_loop_config``."""
STATE_FILE = "state.pt"


def batch(seed: int, step: int, rank: int, size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed * 1_000_003 + step * 1009 + rank)
    x = torch.randn(size, 16, generator=g)
    return x, torch.sin(x.sum(1, keepdim=True))


def each_gradient(group: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    works = [dist.all_reduce(g, async_op=True) for g in bucket.gradients()]
    summed = torch.futures.collect_all([work.get_future() for work in works])

    def mean(done: torch.futures.Future[list[torch.futures.Future[Any]]]) -> torch.Tensor:
        for work in done.value():
            work.value()  # a peer's death fails the step here
        return bucket.buffer().div_(dist.get_world_size())

    return summed.then(mean)


def train(
    config: dict[str, Any],
    resume: Callable[[nn.Module, torch.optim.Optimizer], int],
    save: Callable[[int, nn.Module, torch.optim.Optimizer], None],
) -> None:
    """``resume`` restores and returns the step to go on from; ``save`` checkpoints (or not)
    after a step."""
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(config["seed"])
    rank = dist.get_rank()
    model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 256), nn.ReLU(), nn.Linear(256, 1)))
    model.register_comm_hook(None, each_gradient)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step = resume(model, optimizer)
    steps_file = Path(config["steps_file"])
    if rank == 0:
        with steps_file.open("a") as out:
            out.write(f"start {step} {time.time()}\n")
    while step < config["steps"]:
        if rank == config["kill_rank"] and step == config["kill_step"]:
            kill_once(Path(config["kill_file"]))
        x, y = batch(config["seed"], step, rank)
        optimizer.zero_grad()
        torch.autograd.backward(nn.functional.mse_loss(model(x), y))
        optimizer.step()
        step += 1
        if rank == 0:
            with steps_file.open("a") as out:
                out.write(f"step {step} {time.time()}\n")
        save(step, model, optimizer)
    if rank == 0:
        torch.save(model.module.state_dict(), config["model_file"])


def kill_once(marker: Path) -> None:
    try:
        with marker.open("x") as out:
            out.write(str(time.time()))
    except FileExistsError:
        return  # killed before: this is the restarted run
    os.kill(os.getpid(), signal.SIGKILL)


def ray_train_loop(config: dict[str, Any]) -> None:
    """Ray Train's ``train_loop_per_worker`` (its TorchConfig started the process group)."""
    import ray.train

    def resume(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
        checkpoint = ray.train.get_checkpoint()
        if checkpoint is None:
            return 0
        with checkpoint.as_directory() as where:
            state = torch.load(Path(where) / STATE_FILE)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step: int = state["step"]
        return step

    def save(step: int, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        if step % config["checkpoint_every"]:
            return
        with tempfile.TemporaryDirectory() as where:
            checkpoint = None
            if dist.get_rank() == 0:
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
                torch.save({**state, "step": step}, Path(where) / STATE_FILE)
                checkpoint = ray.train.Checkpoint.from_directory(where)
            ray.train.report({"step": step}, checkpoint=checkpoint)

    train(config, resume, save)


def tenter_main() -> None:
    """The entry point under ``tenter run`` (the job's checkpoint.every sets the saves)."""
    from tenter.checkpoint import Checkpointer

    config = json.loads(os.environ[CONFIG_ENV])
    dist.init_process_group("gloo")
    checkpointer: Checkpointer | None = None

    def resume(model: nn.Module, optimizer: torch.optim.Optimizer) -> int:
        nonlocal checkpointer
        checkpointer = Checkpointer(model, optimizer, every=config["checkpoint_every"])
        return checkpointer.resume()

    def save(step: int, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        assert checkpointer is not None
        checkpointer.maybe_save(step)

    train(config, resume, save)
    assert checkpointer is not None
    checkpointer.close()
    gc.collect()  # DDP's process group, freed before the group (examples/elastic/train.py)
    dist.destroy_process_group()


if __name__ == "__main__":
    tenter_main()
