"""A rank that reports where it runs: ``on_gpu.py OUT_DIR`` writes ``OUT_DIR/rank-<RANK>.json``
(its device, the GPU's UUID, CUDA_VISIBLE_DEVICES) after an all-reduce of a CUDA tensor (when
the rank has a GPU of its own) and of a CPU tensor, each checked against the expected sum."""

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

import tenter

device = tenter.init()
rank, world = tenter.rank(), tenter.world_size()
expected = world * (world + 1) / 2
record = {
    "device": str(device),
    "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "backend": str(dist.get_backend()),
}
if device.type == "cuda":
    record["uuid"] = str(torch.cuda.get_device_properties(device).uuid)
    on_gpu = torch.full((1024,), rank + 1.0, device=device)
    dist.all_reduce(on_gpu)  # NCCL
    record["cuda_sum_ok"] = bool((on_gpu == expected).all().item())
on_cpu = torch.full((1024,), rank + 1.0)
dist.all_reduce(on_cpu)  # gloo, or tenter's shared memory
record["cpu_sum_ok"] = bool((on_cpu == expected).all().item())
out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
(out / f"rank-{rank}.json").write_text(json.dumps(record))
dist.destroy_process_group()
