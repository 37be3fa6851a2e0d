"""The worker side of ``fault_tolerance``: the few things a torchft script tells tenter.

    from tenter.runtime import ft

    store = ft.group_store()                         # the store torchft's Manager expects
    manager = Manager(pg=ProcessGroupGloo(), ..., **ft.manager_options(timeout=...))
    progress = ft.Progress(manager)
    samples = ft.SampleDealer(manager, len(data), batch_size=32, seed=0)
    while manager.current_step() < steps:
        optimizer.zero_grad()                        # torchft's Optimizer wrapper: the quorum
        x, y = data[samples.indices()]               # this rank's share of the step
        ...; optimizer.step()
        samples.step()
        progress.step()

:class:`Progress` writes the last step the replica group committed (the launcher names it
when the group is lost) and records a heal from a peer in ``events.jsonl`` (the launcher
prints ``replica group 1 healed at step 815 from group 0``). :class:`SampleDealer` deals each
epoch's samples by the progress the quorum committed, so that every sample of an epoch is
trained on once across lost and healed groups. See docs/fault_tolerance.md.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from tenter.contract.plan import read_plan
from tenter.data import order
from tenter.data.ledger import SampleLog
from tenter.jobdir import layout
from tenter.jobdir.events import EventKind, record_event
from tenter.runtime import steps

MANAGER_LOGGER = "torchft.manager"
# torchft 0.2's Manager logs where a healing replica group fetches its state from; its public
# API says only that it healed (the step jumps), not from whom.
_HEALING = re.compile(r"healing required.*recover_src_manager_address='([^']*)'.*max_step=(\d+)")


def group_store() -> Any:
    """The replica group's store at ``MASTER_ADDR:MASTER_PORT``, which torchft's ``Manager``
    connects to. tenter's host agent serves it (a fresh one each attempt); a launcher whose
    ranks serve it themselves (``TORCHELASTIC_USE_AGENT_STORE=False``: mpirun's command for
    external launchers) has the group's rank 0 serve it here, as ``init_process_group``
    would. Keep the returned object for the whole run (None: the agent serves it)."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        return None
    import torch.distributed as dist

    return dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        world_size=int(os.environ["WORLD_SIZE"]),
        is_master=os.environ["RANK"] == "0",
        wait_for_workers=False,
    )


def replica_group() -> int:
    return int(os.environ.get("REPLICA_GROUP_ID", "0"))


def manager_options(timeout: timedelta = timedelta(seconds=60)) -> dict[str, Any]:
    """``Manager`` arguments from the job: the group's replica id (torchft wants it to end in
    the group's number), the spec's ``min_replicas``, this host's address to advertise (the
    machine's hostname can name any interface, or all simulated hosts at once), ``timeout``
    (torchft's default), and the checkpoint transport a healing group fetches its peer's state
    through (torchft's, without torch's warning of a non-writable buffer: see compat).
    Under tenter, the Manager's servers (its ManagerServer, the transport's) then listen on
    this host's address only, not on every interface as torchft's own."""
    from tenter.runtime.compat import bind_manager_server, http_checkpoint_transport

    addr = os.environ.get("TENTER_HOST_ADDR") or None
    if addr:
        bind_manager_server(addr)
    return {
        "replica_id": f"tenter_group_{replica_group()}",
        "min_replica_size": int(os.environ.get("TENTER_MIN_REPLICAS", "1")),
        "hostname": addr or socket.gethostname(),
        "timeout": timeout,
        "checkpoint_transport": http_checkpoint_transport(timeout, addr),
    }


def _group_of_address(job_dir: Path, url: str) -> int | None:
    """The replica group of the host at ``url`` (``http://ADDR:PORT``), from the job's plan."""
    host = url.removeprefix("http://").rsplit(":", 1)[0].strip("[]")
    try:
        plan = read_plan(job_dir)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return next((h.replica_group for h in plan.hosts if h.addr == host), None)


class _HealWatch(logging.Handler):
    """Records the heal torchft's Manager logs, with its step and source group. The first
    sync of a process that has not trained yet is its start, no heal: torchft's init_sync at
    step 0, or a group that started later than its peers taking their step. It is a heal
    where the group trained before (this process restarts it)."""

    def __init__(self, job_dir: Path, progress: Progress, restarted: bool) -> None:
        super().__init__(logging.INFO)
        self._job_dir = job_dir
        self._progress = progress
        self._restarted = restarted

    def emit(self, record: logging.LogRecord) -> None:
        match = _HEALING.search(record.getMessage())
        if match is None or not (self._restarted or self._progress.trained):
            return
        record_event(
            self._job_dir,
            EventKind.REPLICA_HEALED,
            group=replica_group(),
            step=int(match.group(2)),
            source=_group_of_address(self._job_dir, match.group(1)),
        )


class Progress:
    """Tells the launcher how the replica group is doing (only the group's rank 0 writes),
    and the goodput ledger each step the group committed (every rank)."""

    def __init__(self, manager: Any) -> None:
        self._manager = manager
        self._committed = manager.current_step()
        self.trained = False
        """Whether this process took part in a committed step."""
        job_dir = os.environ.get("TENTER_JOB_DIR")
        self._reports = os.environ.get("RANK") == "0" and job_dir is not None
        if not self._reports or job_dir is None:
            return
        logs = layout.logs_dir(job_dir)
        self._file = logs / layout.REPLICA_STEP_FILE.format(group=replica_group())
        self._tmp = logs / f".{self._file.name}.tmp"
        logger = logging.getLogger(MANAGER_LOGGER)
        if logger.getEffectiveLevel() > logging.INFO:
            logger.setLevel(logging.INFO)
        logger.addHandler(_HealWatch(Path(job_dir), self, _committed_step(self._file) > 0))

    def step(self) -> None:
        """After each optimizer step: a step the quorum committed counts (under torchft's
        number, which a heal advances); the group's committed step is replaced whole (a
        reader never sees half a number)."""
        step = self._manager.current_step()
        if step > self._committed:
            self._committed, self.trained = step, True
            steps.completed(step)
        if self._reports:
            self._tmp.write_text(str(step))
            self._tmp.replace(self._file)


def _committed_step(path: Path) -> int:
    """The step a group's earlier process last committed, 0 where none did."""
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return 0


STATE_KEY = "tenter_samples"
"""The dealer's entry in the state torchft sends a healing replica group."""


@dataclass(frozen=True)
class _Dealt:
    """What :meth:`SampleDealer.indices` gave for a step."""

    step: int
    participants: int
    participating: bool
    epoch: int
    indices: list[int]


class SampleDealer:
    """Deals each epoch's samples to torchft's replica groups by the progress the quorum
    *committed*, not by a fixed shard per group: every sample of an epoch is trained on once,
    whichever groups are lost, train alone or heal. As a ``DistributedSampler``, one
    permutation per epoch (``torch.randperm`` seeded with ``seed + epoch``) and a global
    position in it; each step's participants (``manager.num_participants()``) take the next
    ``batch_size`` positions each, by ``manager.participating_rank()``, and the position moves
    past them only where the step commits (a step not committed is dealt again). The position
    goes into the state torchft sends a healing group, which so goes on where its peers are.
    The ranks of one replica group split its share (``RANK`` of ``WORLD_SIZE``, every
    ``WORLD_SIZE``-th). Under tenter each rank logs the indices of its committed steps to
    the sample ledger (:mod:`tenter.data.ledger`)."""

    def __init__(
        self, manager: Any, size: int, batch_size: int, *, seed: int = 0, shuffle: bool = True
    ) -> None:
        self._manager = manager
        self.size, self.batch_size, self.seed, self.shuffle = size, batch_size, seed, shuffle
        self.epoch = 0
        self.position = 0
        """The samples the committed steps took from this epoch's permutation."""
        self._permutation: tuple[int, list[int]] = (-1, [])
        self._dealt: _Dealt | None = None
        self._group = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
        job_dir = os.environ.get("TENTER_JOB_DIR")
        # torchft never does a committed step again (a lost group heals to its peers' step):
        # one attempt for every group's records, whose ranks are job-wide.
        rank = replica_group() * self._group[1] + self._group[0]
        self._log = SampleLog(job_dir, rank, attempt="torchft") if job_dir else None
        manager.register_state_dict_fn(STATE_KEY, self.load_state_dict, self.state_dict)

    def indices(self) -> list[int]:
        """This rank's dataset indices for the step whose quorum was started (torchft's
        ``Optimizer.zero_grad``): waits for the quorum. A group that takes no part in the step
        (healing: torchft zeroes its gradients) gets the first participant's, not logged."""
        rank = self._manager.participating_rank()
        participants = max(self._manager.num_participants(), 1)
        length = order.step_length(self.size, self.position, self.batch_size, participants)
        positions = order.step_share(self.position, length, participants, rank or 0)
        permutation = self._order()
        group_rank, group_size = self._group
        mine = [permutation[p] for p in positions][group_rank::group_size]
        step = self._manager.current_step()
        self._dealt = _Dealt(step, participants, rank is not None, self.epoch, mine)
        return mine

    def step(self) -> None:
        """After the optimizer's step: where the quorum committed it, the position moves past
        the step's global batch (from the state a healing group just received) and the rank's
        indices go to the ledger."""
        dealt, self._dealt = self._dealt, None
        if dealt is None or self._manager.current_step() <= dealt.step:
            return
        self.position += order.step_length(
            self.size, self.position, self.batch_size, dealt.participants
        )
        if self.position >= self.size:
            self.epoch, self.position = self.epoch + 1, 0
        if self._log is not None and dealt.participating:
            self._log.write(self._manager.current_step(), dealt.epoch, dealt.indices)

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.position = state["epoch"], state["position"]

    def _order(self) -> list[int]:
        if self._permutation[0] != self.epoch:
            self._permutation = (
                self.epoch,
                epoch_order(self.size, self.seed, self.epoch, self.shuffle),
            )
        return self._permutation[1]


def epoch_order(size: int, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    """An epoch's global order of ``size`` samples: ``DistributedSampler``'s permutation."""
    if not shuffle:
        return list(range(size))
    import torch

    drawn: list[int] = torch.randperm(
        size, generator=torch.Generator().manual_seed(seed + epoch)
    ).tolist()
    return drawn
