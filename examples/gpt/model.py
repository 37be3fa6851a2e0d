"""The GPT of examples/gpt, and its tensor-parallel plan.

A chain of blocks (embedding, transformer blocks, head) written for one device, as
``tenter.parallel.pipeline`` wants it. The plan functions say how each block type splits
over the ``tp`` ranks, torchtitan's Megatron-style layout with sequence parallelism:

- between blocks the activations are split along the sequence (``Shard(1)``): each tp rank
  holds ``seq / tp`` positions, so layer norms (``SequenceParallel``) and the pipeline's
  sends between stages carry 1/tp of them;
- attention and MLP gather the sequence on entry, split their first projections by output
  columns (``ColwiseParallel``: q, k, v by heads, the MLP's hidden units) and their last by
  input rows (``RowwiseParallel``), which reduce-scatters back to sequence shards;
- the embedding tables split by rows, their lookups reduce-scattered into sequence shards;
  the head's projection splits by vocabulary columns, its logits gathered whole for the
  log-probabilities.

Attention therefore works on ``heads / tp`` local heads: ``heads`` must be a multiple of tp.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
)
from torch.nn import functional as F

from tenter import parallel


class Embedding(nn.Module):
    def __init__(self, vocab: int, seq: int, dim: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.positions = nn.Embedding(seq, dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.tokens(ids) + self.positions(torch.arange(ids.shape[1], device=ids.device))


class Attention(nn.Module):
    """Causal self-attention; q, k and v are separate projections so that a column split
    gives each rank whole heads of all three."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.head_dim = dim // heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        # -1: the heads this rank holds (all of them without tensor parallelism).
        q, k, v = (
            z(x).view(b, t, -1, self.head_dim).transpose(1, 2) for z in (self.q, self.k, self.v)
        )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(b, t, -1))


class MLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, 4 * dim)
        self.proj = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


class Block(nn.Module):
    """Pre-norm attention and MLP, as in nanoGPT."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.ln2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Head(nn.Module):
    def __init__(self, dim: int, vocab: int) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Log-probabilities, a tensor of their own: the logits of a Linear on (batch, seq, dim)
        # are a view of its 2-D product, which FSDP2 warns of (an in-place op on a view
        # would skip its gradient hook).
        return F.log_softmax(self.out(self.ln(x)), dim=-1)


def gpt(vocab: int, seq: int, dim: int, layers: int, heads: int) -> nn.Sequential:
    blocks = [Block(dim, heads) for _ in range(layers)]
    return nn.Sequential(Embedding(vocab, seq, dim), *blocks, Head(dim, vocab))


def loss_fn(log_probs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the head's log-probabilities."""
    return F.nll_loss(log_probs.reshape(-1, log_probs.shape[-1]), targets.reshape(-1))


def _gather_sequence() -> ParallelStyle:
    return PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))


@parallel.tp_plan(Embedding)
def embedding_plan(_: Embedding) -> dict[str, ParallelStyle]:
    # Both tables split by rows: each rank looks up the ids it holds, and the lookups are
    # summed across the ranks straight into sequence shards (a reduce-scatter: the token
    # lookup is (batch, seq, dim), the position lookup (seq, dim)).
    return {
        "tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(1)),
        "positions": RowwiseParallel(input_layouts=Replicate(), output_layouts=Shard(0)),
    }


@parallel.tp_plan(Block)
def block_plan(_: Block) -> dict[str, ParallelStyle]:
    return {
        "ln1": SequenceParallel(),
        "attn": _gather_sequence(),
        "attn.q": ColwiseParallel(),
        "attn.k": ColwiseParallel(),
        "attn.v": ColwiseParallel(),
        "attn.proj": RowwiseParallel(output_layouts=Shard(1)),
        "ln2": SequenceParallel(),
        "mlp": _gather_sequence(),
        "mlp.fc": ColwiseParallel(),
        "mlp.proj": RowwiseParallel(output_layouts=Shard(1)),
    }


@parallel.tp_plan(Head)
def head_plan(_: Head) -> dict[str, ParallelStyle]:
    return {
        "ln": SequenceParallel(),
        "out": ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate()),
    }
