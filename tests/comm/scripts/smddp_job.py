"""A job script that leaves the backend to the job spec, as SMDDP scripts do: reports what
``tenter.init()`` chose and how the backend grouped the ranks into hosts."""

import torch
import torch.distributed as dist

import tenter

tenter.init()
backend = dist.get_backend()
hosts = dist.group.WORLD.topology.num_hosts  # the TenterProcessGroup itself
total = torch.tensor([float(tenter.rank() + 1)])
dist.all_reduce(total)
world = tenter.world_size()
assert total.item() == world * (world + 1) / 2, total
print(f"rank {tenter.rank()}: backend={backend} hosts={hosts}")
dist.destroy_process_group()
