"""The worker side of ``fault_tolerance``: the few things a torchft script tells tenter.

    from tenter.runtime import ft

    store = ft.group_store()                         # the store torchft's Manager expects
    manager = Manager(pg=ProcessGroupGloo(), ..., **ft.manager_options(timeout=...))
    progress = ft.Progress(manager)
    while manager.current_step() < steps:
        ...; optimizer.step()                        # torchft's Optimizer wrapper
        progress.step()

:class:`Progress` writes the last step the replica group committed (the launcher names it
when the group is lost) and records a heal from a peer in ``events.jsonl`` (the launcher
prints ``replica group 1 healed at step 815 from group 0``). See docs/fault_tolerance.md.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from datetime import timedelta
from pathlib import Path
from typing import Any

from tenter.contract.plan import read_plan
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
