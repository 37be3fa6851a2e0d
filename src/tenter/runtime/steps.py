"""The DDP steps of a rank, counted without any code in the training script: the goodput
ledger's and the straggler rule's steps for scripts that do not call ``tenter.report``.

Installed by the bootstrap in every tenter job. Through public hooks only: a global forward
pre-hook (``register_module_forward_pre_hook``) looks for the first
``DistributedDataParallel`` module to run, then hooks that module alone and goes away (a
script without DDP pays for it during its first :data:`LOOK_FOR_DDP` module calls only). On
that module, a gradient hook on every parameter notes when the rank's last gradient of the
step was ready: its *arrival* at the step's all-reduce, before any wait for its peers. At the
next forward (or when the script returns) the step's arrival is appended to
``<job_dir>/metrics/steps/rank-<N>.jsonl`` as ``{"time": arrival, "step": k}``, through a
buffer (about a microsecond per step). The straggler rule compares these arrivals across
ranks; the ledger takes them as the rank's steps.

An FSDP2 module (``fully_shard``'s ``FSDPModule``) is found the same way: its gradients are
reduced inside FSDP's own backward, so its step's arrival is the start of its forward, where
the rank reaches the step's first collective (the parameters' all-gather); a rank that takes
longer between its steps (its data, its checkpoint, a slow host) arrives late there.

Training that is neither tells the counter itself where its steps end
(:func:`completed`): tenter's own step helpers do, so that scripts using them need no
``tenter.report`` either. :meth:`tenter.parallel.Pipeline.step` (pipelines, FSDP2, tensor
parallelism) counts each step, :meth:`tenter.runtime.ft.Progress.step` each step torchft
committed, under its number. The first such call ends the search for a DDP module, so that a
step is never counted twice.

Every ``TENTER_REPLICA_CHECK_EVERY`` steps of the DDP module, its replicas are compared
(:mod:`tenter.runtime.replicas`) at the start of the next step's forward.

A restarted rank counts on from the step its :class:`~tenter.checkpoint.Checkpointer`
resumed (:func:`resumed_at`), so that the ledger tells steps computed again from new ones.
"""

from __future__ import annotations

import atexit
import time
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.distributed.fsdp import FSDPModule
from torch.nn.parallel import DistributedDataParallel
from torch.utils.hooks import RemovableHandle

from tenter.jobdir.layout import rank_steps_file
from tenter.jobdir.line_files import BufferedLines
from tenter.runtime.replicas import ReplicaCheck

LOOK_FOR_DDP = 10_000
"""Module calls after which a script that has not run a DDP module is assumed to have none."""


class StepCounter:
    def __init__(self, path: Path) -> None:
        self._lines = BufferedLines(path)
        self.step = 0
        self._arrival: float | None = None
        self._calls = 0
        self._ddp: DistributedDataParallel | None = None
        self._sharded = False
        self._replicas: ReplicaCheck | None = None
        self._last_args: Any = None
        self._told = False
        self._first = True
        self._finder: RemovableHandle | None = nn.modules.module.register_module_forward_pre_hook(
            self._look
        )
        atexit.register(self._at_exit)

    def _look(self, module: nn.Module, args: Any) -> None:
        self._calls += 1
        if isinstance(module, DistributedDataParallel):
            self._watch(module, args)
        elif isinstance(module, FSDPModule):
            self._watch_sharded(module, args)
        if self._ddp is not None or self._sharded or self._calls >= LOOK_FOR_DDP:
            self._stop_looking()

    def _stop_looking(self) -> None:
        if self._finder is not None:
            self._finder.remove()
            self._finder = None

    def _watch(self, ddp: DistributedDataParallel, args: Any) -> None:
        self._ddp = ddp
        self._replicas = ReplicaCheck(ddp.module, ddp.process_group)
        ddp.register_forward_pre_hook(self._forward)
        for param in ddp.parameters():
            if param.requires_grad:
                param.register_post_accumulate_grad_hook(self._grad_ready)  # type: ignore[no-untyped-call]
        self._forward(ddp, args)

    def _watch_sharded(self, root: nn.Module, args: Any) -> None:
        """``root``: the first FSDP2 module to run a forward, the outermost."""
        self._sharded = True
        root.register_forward_pre_hook(self._sharded_forward)
        self._sharded_forward(root, args)

    def _sharded_forward(self, module: nn.Module, args: Any) -> None:
        arrival = time.time()
        if self._began(module, args):
            self._arrival = arrival

    def _grad_ready(self, param: torch.Tensor) -> None:
        if not self._told:
            self._arrival = time.time()

    def _forward(self, module: nn.Module, args: Any) -> None:
        """A forward pre-hook (which returns None: anything else replaces the forward's
        arguments): a forward begins."""
        self._began(module, args)

    def _began(self, module: nn.Module, args: Any) -> bool:
        """A forward begins: the step before it is done. Whether a step began."""
        if self._told or not module.training or args is self._last_args:
            return False  # evaluation is no step; the finder and the module's hook saw one
        self._last_args = args
        self._write()
        if self.step and self._replicas is not None:
            self._replicas.maybe(self.step)  # after step `step`'s update, on every rank
        self.step += 1
        return True

    def _write(self) -> None:
        if self._arrival is not None:
            line: dict[str, object] = {"time": self._arrival, "step": self.step}
            if self._first:  # the process's first step: its end ends a recovery's timeline
                line["done"], self._first = time.time(), False
            self._lines.add(line)
            self._arrival = None

    def completed(self, step: int | None) -> None:
        """Step ``step`` (default: the next) ended now; from here on only these calls count."""
        self.counted_by_caller()
        self._arrival = None
        self.step = self.step + 1 if step is None else step
        self._lines.add({"time": time.time(), "step": self.step})

    def counted_by_caller(self) -> None:
        """From here on only :meth:`completed` counts steps, not the module hooks."""
        self._told = True
        self._stop_looking()

    def finish(self) -> None:
        """The script returned: its last step is done too."""
        self._write()
        self._lines.flush()

    def _at_exit(self) -> None:
        # Not the step in progress: a rank leaving on an error (a peer died in that step's
        # all-reduce) did not finish it.
        self._lines.flush()


_counter: StepCounter | None = None


def install(job_dir: str, rank: int) -> None:
    global _counter
    _counter = StepCounter(rank_steps_file(job_dir, rank))


def finish() -> None:
    """The script succeeded (the bootstrap): record its last step."""
    if _counter is not None:
        _counter.finish()


def completed(step: int | None = None) -> None:
    """A step of this rank ended now: ``step`` (the number of steps done), or the one after
    the last. For step helpers whose training the DDP counter cannot see."""
    if _counter is not None:
        _counter.completed(step)


def counted_by_caller() -> None:
    """The caller counts the steps with :func:`completed`, and the modules it runs are not to
    count them too (a pipeline's FSDP2 stages run a forward per microbatch)."""
    if _counter is not None:
        _counter.counted_by_caller()


def resumed_at(step: int) -> None:
    """The training goes on after ``step`` (a checkpoint's): count from there."""
    if _counter is not None:
        _counter.step = step
