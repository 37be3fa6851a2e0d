"""Every private torch name ``tenter.launch`` uses, for the host agent (:mod:`.agent`).

The agent is torch elastic's ``LocalElasticAgent`` with a few of its template methods
changed. Those methods, the worker handler it builds processes with and the rendezvous's
poll are torch's internals: they are reached here only, under names tenter owns, so that
the rest of ``tenter.launch`` reads as public API. A tag ``[torch A-B]`` or ``[torch A+]``
says which torch versions a line serves (no tag: every supported one); the API check
(tests/torch_versions) checks each line against those versions, and tells when one serves
only versions below the floor (then delete it).
"""

from __future__ import annotations

import inspect
import signal
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from types import FrameType
from typing import Any

import torch.distributed.elastic.multiprocessing.api as torch_processes
from torch.distributed.elastic.agent.server.api import RunResult, Worker, WorkerGroup, WorkerSpec
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
from torch.distributed.elastic.multiprocessing.subprocess_handler import SubprocessHandler
from torch.distributed.elastic.rendezvous import RendezvousHandler, dynamic_rendezvous
from torch.distributed.elastic.rendezvous.utils import _delay

StopHandler = Callable[[int, FrameType | None], None]

_SHUTDOWN_PARAMETERS = inspect.signature(LocalElasticAgent._shutdown).parameters
SHUTDOWN_TAKES_IS_RESTART = "is_restart" in _SHUTDOWN_PARAMETERS  # [torch 2.7]
SHUTDOWN_TAKES_TIMEOUT = "timeout" in _SHUTDOWN_PARAMETERS  # [torch 2.12+]
"""How ``LocalElasticAgent._shutdown`` is called: ``(death_sig, is_restart=False)`` up to
2.7, ``(death_sig)`` in 2.8-2.11 (torch's grace period of 30 s), ``(death_sig, timeout=30)``
from 2.12."""


class AgentHooks(LocalElasticAgent):
    """torch's local agent, whose private template methods call tenter's hooks."""

    def after_rendezvous(self, worker_group: WorkerGroup) -> None:
        """A rendezvous round has ended; ``worker_group`` has its group rank and size."""

    def assign_ranks(
        self, group_rank: int, group_world_size: int, spec: WorkerSpec
    ) -> list[Worker]:
        """The host's workers, with their ranks."""
        raise NotImplementedError

    def before_monitor(self) -> None:
        """Every monitor interval, before torch looks at the workers."""

    def before_restart(self, remaining_restarts: int) -> None:
        """The workers are about to be stopped and started again."""

    stop_grace_s = 30
    """Seconds between the stop signal and SIGKILL (from torch 2.12; torch's 30 s before)."""

    def stopping_workers(self) -> AbstractContextManager[None]:
        """What surrounds torch's stopping of the workers."""
        return nullcontext()

    def _rendezvous(self, worker_group: WorkerGroup) -> None:
        super()._rendezvous(worker_group)
        self.after_rendezvous(worker_group)

    def _assign_worker_ranks(
        self, store: Any, group_rank: int, group_world_size: int, spec: WorkerSpec
    ) -> list[Worker]:
        return self.assign_ranks(group_rank, group_world_size, spec)

    def _monitor_workers(self, worker_group: WorkerGroup) -> RunResult:
        self.before_monitor()
        result: RunResult = super()._monitor_workers(worker_group)
        return result

    def _restart_workers(self, worker_group: WorkerGroup) -> None:
        self.before_restart(self._remaining_restarts)
        super()._restart_workers(worker_group)

    def _shutdown(  # type: ignore[override]  # the union of every torch's parameters
        self,
        death_sig: signal.Signals = signal.SIGTERM,
        is_restart: bool = False,  # [torch 2.7]: a restart keeps the rendezvous open
        timeout: int = 30,  # [torch 2.12+]: tenter's stop_grace_s instead
    ) -> None:
        with self.stopping_workers():
            if SHUTDOWN_TAKES_IS_RESTART:
                super()._shutdown(death_sig, is_restart=is_restart)  # type: ignore[call-arg]  # [torch 2.7]
            elif SHUTDOWN_TAKES_TIMEOUT:
                super()._shutdown(death_sig, timeout=self.stop_grace_s)  # [torch 2.12+]
            else:
                super()._shutdown(death_sig)  # [torch 2.8-2.11]


class WorkerProcess(SubprocessHandler):
    """torch's handle on one worker process, which tenter starts itself."""

    def popen(self, args: tuple[str, ...], env: dict[str, str], stdout: Any, stderr: Any) -> Any:
        """Start the worker: ``stdout``/``stderr`` are the open files torch chose (or None)."""
        raise NotImplementedError

    def _popen(self, args: tuple[str, ...], env: dict[str, str]) -> Any:
        return self.popen(args, env, self._stdout, self._stderr)


def use_worker_processes(factory: Callable[..., SubprocessHandler]) -> None:
    """Make torch build every worker's handler with ``factory`` (its handler's arguments)."""
    torch_processes.get_subprocess_handler = factory


def torch_stop_handler() -> StopHandler:
    """The handler torch installs for stop signals once the workers start."""
    return torch_processes._terminate_process_handler


def replace_stop_handler(handler: StopHandler) -> None:
    """Have torch install ``handler`` for stop signals instead of its own."""
    torch_processes._terminate_process_handler = handler  # type: ignore[assignment]


def poll_rendezvous_every(poll_s: float) -> None:
    """Make torch's dynamic rendezvous read the round's state every ``poll_s`` while waiting
    (torch: 1 s), and read it afresh each time (torch serves a copy up to 1 s old; see
    :func:`read_state_afresh`)."""

    def delay(seconds: float | tuple[float, float]) -> None:
        # torch asks for 1 s between polls of the state, and for random delays (a tuple) to
        # skew the first joins and retries; only the poll is shortened.
        _delay(poll_s if seconds == 1 else seconds)

    dynamic_rendezvous._delay = delay


def read_state_afresh(handler: RendezvousHandler) -> None:
    """Have ``handler`` (torch's dynamic rendezvous) read the shared state at each poll."""
    if isinstance(handler, dynamic_rendezvous.DynamicRendezvousHandler):
        holder = handler._state_holder
        if isinstance(holder, dynamic_rendezvous._BackendRendezvousStateHolder):
            holder._cache_duration = 0
