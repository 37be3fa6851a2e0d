"""A DDP script as the SDK's guide describes ("Distributed PyTorch Training"): it initializes
torch.distributed from the environment SageMaker (here tenter) sets, and trains one step."""

import json
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
model = DistributedDataParallel(torch.nn.Linear(4, 1))
model(torch.full((2, 4), float(rank))).sum().backward()  # DDP averages the gradients
grad = model.module.weight.grad
assert grad is not None
if rank == 0:
    with open(os.path.join(os.environ["SM_MODEL_DIR"], "grad.json"), "w") as f:
        json.dump({"world": world, "grad": grad.tolist()}, f)
dist.destroy_process_group()
