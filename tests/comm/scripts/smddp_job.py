"""A job script that leaves the backend to the job spec, as SMDDP scripts do: reports what
``tenter.init()`` chose and how the backend grouped the ranks into hosts, then checks that
``destroy_process_group`` frees the group at once. A group that only the garbage collector
frees is destroyed at interpreter exit, with its inner gloo groups' threads still running:
an intermittent abort ("terminate called without an active exception")."""

import weakref

import torch
import torch.distributed as dist

import tenter

tenter.init()
backend = dist.get_backend()
group = weakref.ref(dist.group.WORLD)
hosts = dist.group.WORLD.topology.num_hosts  # the TenterProcessGroup itself
total = torch.tensor([float(tenter.rank() + 1)])
dist.all_reduce(total)
world = tenter.world_size()
assert total.item() == world * (world + 1) / 2, total
dist.destroy_process_group()
print(f"rank {tenter.rank()}: backend={backend} hosts={hosts} freed={group() is None}")
