"""A DDP job over torch's DataLoader and DistributedSampler that logs the samples of every
step (tenter.data.ledger), checkpointed every checkpoint.every steps, and its faults:

- LOSE_AT_STEP: at this step of the first attempt, the last host's first rank SIGKILLs its
  host's agent and itself (a host lost mid-epoch). The global batch (GLOBAL_BATCH) is the
  same at every world size: the job keeps the uninterrupted run's order.
- FLIP_AT: after this step, rank FLIP_RANK flips one bit of one parameter (silent data
  corruption in one replica)."""

import gc
import os
import signal

import psutil
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import tenter
from tenter.checkpoint import Checkpointer
from tenter.data.ledger import SampleLog

SIZE, EPOCHS = 60, 2
GLOBAL_BATCH = int(os.environ.get("GLOBAL_BATCH", "12"))
LOSE_AT_STEP = int(os.environ.get("LOSE_AT_STEP", "0"))
FLIP_AT = int(os.environ.get("FLIP_AT", "0"))
FLIP_RANK = int(os.environ.get("FLIP_RANK", "1"))


def lose_this_host() -> None:
    """SIGKILL this host's agent, then this rank: the host is lost, its other workers end
    with it, and no rank finishes the next step (its all-reduce waits for this one)."""
    agent = psutil.Process().parent()
    while agent is not None and "tenter.launch.agent" not in " ".join(agent.cmdline()):
        agent = agent.parent()
    assert agent is not None, "no agent above this rank"
    agent.send_signal(signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def flip_one_bit(param: torch.Tensor) -> None:
    with torch.no_grad():
        param.view(-1)[:1].view(torch.int32).bitwise_xor_(1)  # the lowest mantissa bit


def main() -> None:
    tenter.init()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(SIZE, 4), torch.arange(SIZE))
    sampler = DistributedSampler(data, seed=1)
    loader = DataLoader(data, batch_size=GLOBAL_BATCH // dist.get_world_size(), sampler=sampler)
    model = DistributedDataParallel(nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    ckpt = Checkpointer(model, optimizer, sampler=loader)
    step = ckpt.resume()
    samples = SampleLog()
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0"
    last_host_leader = int(os.environ["LOCAL_RANK"]) == 0 and int(os.environ["GROUP_RANK"]) == (
        int(os.environ["GROUP_WORLD_SIZE"]) - 1
    )
    for epoch in range(sampler.epoch, EPOCHS):
        sampler.set_epoch(epoch)
        for x, index in loader:
            optimizer.zero_grad()
            model(x).square().mean().backward()
            optimizer.step()
            step += 1
            samples.write(step, epoch, index.tolist())
            if step == FLIP_AT and dist.get_rank() == FLIP_RANK:
                flip_one_bit(model.module.weight)
            ckpt.maybe_save(step)
            if step == LOSE_AT_STEP and first_attempt and last_host_leader:
                lose_this_host()
    ckpt.close()
    print(f"done at step {step}, world {dist.get_world_size()}", flush=True)
    gc.collect()  # see examples/elastic/train.py: DDP's group freed with the GIL released
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
