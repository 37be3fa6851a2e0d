"""A small character-level GPT on Shakespeare, pipelined, tensor-parallel and data-parallel
with tenter.parallel.

    tenter run examples/gpt/job.yaml                                  # pp 2 x dp 2, from the job
    tenter run examples/gpt/job-v2.yaml                               # SMP v2: HSDP x tp 2
    tenter run --hosts 2 --procs-per-host 2 examples/gpt/train.py -- --pp 2 --tp 2
    python examples/gpt/train.py --pp 1 --steps 20                    # one process

The model (``model.py``) is an ``nn.Sequential`` (embedding, blocks, head) written for one
device, with a tensor-parallel plan per block type; ``parallel.pipeline`` splits it into
balanced stages, each block over the tp ranks. Each step trains on the same global batch
whatever the layout: data-parallel replica d takes the d-th slice, so pp 1 and
pp 2 x dp 2 x tp 2 see the same data.

``--checkpoint_every N`` checkpoints the pipeline with ``tenter.checkpoint`` (each rank saves
its own stages and their optimizer state) and resumes from the latest checkpoint on start.
"""

import argparse
import gc
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.distributed as dist
from model import gpt, loss_fn

import tenter
from tenter import parallel
from tenter.checkpoint import Checkpointer

CORPUS = Path(__file__).parent / "data" / "shakespeare.txt"


def batches(
    data: torch.Tensor, batch: int, seq: int, seed: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Random windows of the corpus, the same sequence on every rank."""
    gen = torch.Generator().manual_seed(seed)
    while True:
        starts = torch.randint(len(data) - seq - 1, (batch,), generator=gen)
        x = torch.stack([data[s : s + seq] for s in starts])
        y = torch.stack([data[s + 1 : s + seq + 1] for s in starts])
        yield x, y


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pp", type=int, help="pipeline stages (default: the job's)")
    ap.add_argument("--tp", type=int, help="tensor-parallel ranks (default: the job's)")
    ap.add_argument("--activation_checkpointing", action="store_true", help="recompute activations")
    ap.add_argument("--schedule", choices=["gpipe", "1f1b", "interleaved"])
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--batch_size", type=int, default=32, help="global batch (sequences)")
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checkpoint_every", type=int, help="steps (default: no checkpoints)")
    ap.add_argument("--checkpoint_dir", help="default: the job's")
    args = ap.parse_args()

    device = tenter.init()
    text = CORPUS.read_text(encoding="utf-8")
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)

    mesh = parallel.mesh(pp=args.pp, tp=args.tp)
    info = parallel.rank_info(mesh)
    torch.manual_seed(args.seed)  # every rank builds the same model, then keeps its stages
    model = gpt(len(chars), args.seq, args.dim, args.layers, args.heads)
    per_replica = args.batch_size // info.dp_size
    example = data[: per_replica * args.seq].view(per_replica, args.seq)
    pipe = parallel.pipeline(
        model,
        mesh,
        loss_fn=loss_fn,
        microbatches=args.microbatches,
        schedule=args.schedule,
        example_input=example[: per_replica // args.microbatches],
        activation_checkpointing=args.activation_checkpointing or None,
    )
    tenter.print0(parallel.describe(pipe))
    optimizer = torch.optim.AdamW(pipe.parameters(), lr=args.lr)
    ckpt, start = None, 0
    if args.checkpoint_every:
        # Every rank saves (and restores) its own stages and their optimizer state.
        ckpt = Checkpointer(pipe, optimizer, dir=args.checkpoint_dir, every=args.checkpoint_every)
        start = ckpt.resume()
        where = f"checkpoints every {ckpt.every} steps in {ckpt.dir}"
        tenter.print0(f"resumed at step {start}; {where}" if start else where, flush=True)
    # The last stage of replica 0 knows the loss (so do its tp peers); it reports for everyone.
    reporter = pipe.is_last and info.dp_rank == 0 and info.tp_rank == 0
    losses = []
    stream = batches(data, args.batch_size, args.seq, args.seed)
    for _ in range(start):  # the batches the checkpoint's steps trained on
        next(stream)
    for step in range(start, args.steps):
        x, y = next(stream)
        x = x.chunk(info.dp_size)[info.dp_rank].to(device)
        y = y.chunk(info.dp_size)[info.dp_rank].to(device)
        loss = pipe.step(x, target=y)
        optimizer.step()
        optimizer.zero_grad()
        if reporter and loss is not None:
            losses.append(loss.item())
            if step % 10 == 0 or step == args.steps - 1:
                print(f"step {step:3d}  loss {loss.item():.3f}", flush=True)
        if ckpt and ckpt.maybe_save(step + 1):
            tenter.print0(f"saved checkpoint at step {step + 1}", flush=True)
            if ckpt.preempted:  # SIGTERM: that was the final checkpoint; stop on every rank
                tenter.print0(f"preempted at step {step + 1}: stopping", flush=True)
                break
    if ckpt:
        ckpt.close()
    if reporter and losses and not (ckpt and ckpt.preempted):  # none when resumed at the end
        window = min(5, len(losses))
        result = {
            "pp": info.pp_size,
            "dp": info.dp_size,
            "tp": info.tp_size,
            "uniform_loss": math.log(len(chars)),
            "first_loss": sum(losses[:window]) / window,
            "last_loss": sum(losses[-window:]) / window,
            "final_loss": losses[-1],
        }
        print(json.dumps(result), flush=True)
        out = Path(os.environ.get("SM_OUTPUT_DATA_DIR", "."))
        (out / "gpt-result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
    # The pipeline's stages and DDP/FSDP wrappers hold the process groups in reference
    # cycles; collect them while the groups are alive (pytorch/pytorch#56297), then
    # tear the groups down rather than leave it to interpreter exit.
    gc.collect()
    dist.destroy_process_group()
