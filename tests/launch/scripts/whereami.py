"""Each rank says which machine it runs on (the kernel's hostname, the host tenter placed it
on, the address it was given) and checks that an all_reduce across every machine adds up."""

import os
import socket

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
total = torch.tensor([float(rank)])
dist.all_reduce(total)
assert total.item() == world * (world - 1) / 2, total
print(
    f"rank {rank} of {world} on {socket.gethostname()} as {os.environ['SM_CURRENT_HOST']} "
    f"at {os.environ['TENTER_HOST_ADDR']} nic {os.environ['SM_NETWORK_INTERFACE_NAME']}: "
    "all_reduce ok",
    flush=True,
)
dist.destroy_process_group()
