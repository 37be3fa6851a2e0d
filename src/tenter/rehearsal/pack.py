"""``python -m tenter.rehearsal.pack PLAN_JSON RDZV_PORT FIRST COUNT``: hosts FIRST..FIRST+COUNT-1
of a rehearsal, each tenter's real :class:`~tenter.launch.agent.host.HostAgent` (rendezvous,
in-round restart, control requests, agent result), as threads of this one process.

Only the process boundary is simulated: an agent process imports torch (about 2 s of CPU and
200 MB each), which 1,024 of would not fit on one machine; here a pack of hosts pays one. Its
host is "lost" (:func:`tenter.rehearsal.commands.lose_host`) as a machine dies: its ranks are
SIGKILLed, its agent ends without a result (the launcher's proxy then reads SIGKILL,
:mod:`tenter.rehearsal.job`). A SIGTERM to the pack stops every agent as a SIGTERM to each
agent process would. The store requests each host makes are counted (:mod:`.store_count`).
Each agent's ranks come from its warm pool (tenter's own), whose template is a light rank's
(:class:`LightPool`).
"""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

from tenter.contract.plan import HostPlan, Plan
from tenter.contract.torchrun import shared_worker_env
from tenter.jobdir.agent_result import AgentResult, HostState, write_result
from tenter.jobdir.control import control_dir
from tenter.jobdir.layout import spares_tmp_dir
from tenter.launch.agent.spares import WarmPool
from tenter.launch.agent.template import ForkedProcess
from tenter.rehearsal import commands, store_count

logger = logging.getLogger(__name__)

LOST_MARKER = "rehearsal-lost"
"""In a host's directory: its agent died as a lost machine's (the launcher's proxy reads it)."""


class HostLost(Exception):
    """The rehearsal took this host's machine away."""


def lost_marker(host: HostPlan) -> Path:
    return Path(host.dir) / LOST_MARKER


class LightPool(WarmPool):
    """A host's warm pool (:mod:`tenter.launch.agent.spares`: its template, handoff and
    take) whose template is ``python -m tenter.rehearsal.rank --warm``: spares that become
    light ranks. Its template is a fresh process of a few MB, not a fork of the pack as an
    agent's is: forks of a process that imported torch cost the kernel more (at 64 x 8, 28 s
    of system CPU against 13 s, the first step 25 s against 13 s). It has nothing to preload.

    No spare waits: each is forked when a rank is taken (a fork of a few milliseconds, which
    a real pool makes just after the workers start instead). A host's 8 waiting spares were
    8 of its 17 processes, which bounded the size a machine can rehearse (pids, memory)."""

    def __init__(self, plan: Plan, host: HostPlan, env: dict[str, str]) -> None:
        tmp_dir = spares_tmp_dir(plan.job_dir, host.name)
        super().__init__(plan.command[0], 0, env, plan.cwd, tmp_dir, ())
        self.command = list(plan.command)

    def preload(self) -> None:
        """Nothing to import."""

    def take(self, *args: Any, **kwargs: Any) -> ForkedProcess | None:
        """A spare forked now, become the rank (:meth:`WarmPool.take`'s arguments)."""
        self._size = 1
        try:
            self.fill()
        finally:
            self._size = 0
        return super().take(*args, **kwargs)


def run_agent(plan: Plan, host: HostPlan, rdzv_port: str, stop: threading.Event) -> None:
    """One host's agent, as :func:`tenter.launch.agent.run.run_host` runs it, but the signals
    (the pack's) and a host lost (no result, as a dead machine writes none)."""
    from tenter.launch.agent import job_store, rendezvous
    from tenter.launch.agent.host import HostAgent, StopSignal
    from tenter.launch.agent.spec import agent_spec

    class RehearsalAgent(HostAgent):
        _looked_at = 0

        def _step(self) -> AgentResult | None:
            if stop.is_set():
                raise StopSignal(signal.SIGTERM)
            self._lose_if_asked()
            return super()._step()

        def _lose_if_asked(self) -> None:
            try:
                mtime = os.stat(control_dir(plan.job_dir)).st_mtime_ns
            except OSError:
                return
            if mtime != self._looked_at:
                self._looked_at = mtime
                if commands.host_to_lose(plan.job_dir, host.name):
                    self.group.stop(signal.SIGKILL, grace_s=0)
                    raise HostLost(host.name)

    store_count.this_thread_is(host.index)
    env = shared_worker_env(os.environ, plan.pass_environment, plan.host_env(host))
    store, port = job_store.start(plan, host) if plan.store_on_first_host else (None, rdzv_port)
    at = rendezvous.endpoint(plan, str(port))
    handler = rendezvous.create_handler(plan, host, at)
    planned = (
        functools.partial(rendezvous.join_planned, plan, host, at)
        if plan.planned_first_round
        else None
    )
    pool = LightPool(plan, host, env)
    pool.fill()
    agent = RehearsalAgent(agent_spec(plan, host, at, env), handler, pool, planned)
    try:
        result = agent.run()
        result = AgentResult(result.state, [*result.failures, *agent.finished_then_crashed()])
    except HostLost:
        lost_marker(host).write_text("")
        return
    except Exception as e:  # as run_host: report, don't just die
        logger.exception("agent of %s failed", host.name)
        result = AgentResult(HostState.ERROR, [], f"{type(e).__name__}: {e}")
    finally:
        pool.close()
    handler.shutdown()
    write_result(host.dir, result)
    if store is not None:
        job_store.linger(plan)


def main(argv: list[str]) -> int:
    plan_path, rdzv_port, first, count = argv[:4]
    plan = Plan.from_json(Path(plan_path).read_text())
    hosts = plan.hosts[int(first) : int(first) + int(count)]
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(threadName)s %(message)s")
    # The agents' own workers' store opt-out, as run_host sets it.
    from tenter.launch.agent import rendezvous

    os.environ[rendezvous.SHARED_STORE_OPT_OUT] = "1"
    store_count.install(plan.job_dir, int(first))
    stop = threading.Event()

    signalled: list[int] = []

    def stopping(signum: int, frame: FrameType | None) -> None:
        # Once: a signal that comes while the first one's handler is inside stop.set() would
        # wait for the lock that handler holds, in the same thread, forever (a 256-host pack
        # was found so, 60 handlers deep, after its launcher's SIGKILL).
        if not signalled:
            signalled.append(signum)
            stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, stopping)
    threads = [
        threading.Thread(
            target=run_agent, args=(plan, host, rdzv_port, stop), name=host.name, daemon=True
        )
        for host in hosts
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(timeout=0.5)
            store_count.save()
    store_count.save()
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    logging.shutdown()
    os._exit(code)
