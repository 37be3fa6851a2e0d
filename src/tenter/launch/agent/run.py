"""One host's run, once its spares are started (:mod:`.main`): the stop signals, the
rendezvous (torch's c10d or etcd handler; a job of fixed membership starts in the round its
plan gives), the host's workers, and ``agent-result.json`` in the host directory for the
launcher to report.

Signals: SIGTERM, SIGINT, SIGHUP and SIGQUIT stop the workers with that signal (SIGKILL after
the stop grace period) and end the agent as STOPPED. The launcher of a local job stops its
agents with SIGTERM and preempts the job itself; it starts them with a parent-death signal, so
a launcher that dies stops them as a cancel. On a scheduler's nodes (Slurm) SIGTERM comes
from the scheduler (``scancel``, a preemption) and asks for a preemption: the agent writes the
request its workers check at their step boundaries and lets them finish, stopping them only
once the spec's ``checkpoint.preemption_grace`` has passed.
"""

from __future__ import annotations

import functools
import logging
import os
import signal
from types import FrameType

from torch.distributed.elastic.rendezvous import RendezvousError

from tenter.contract.plan import HostPlan, Plan
from tenter.jobdir.agent_result import AgentResult, HostState, write_result
from tenter.jobdir.control import request_preemption
from tenter.launch.agent import rendezvous
from tenter.launch.agent.host import HostAgent, StopSignal
from tenter.launch.agent.spares import WarmPool
from tenter.launch.agent.spec import agent_spec
from tenter.launch.shared.signals import STOP_SIGNALS

AGENT_SIGNALS = (*STOP_SIGNALS, signal.SIGQUIT)
"""The signals that stop the agent: torchrun's (``TORCHELASTIC_SIGNALS_TO_HANDLE``)."""

logger = logging.getLogger(__name__)


def _stop(signum: int, frame: FrameType | None) -> None:
    raise StopSignal(signum)


def _install_stop_handlers(plan: Plan, host: HostPlan) -> None:
    """Every stop signal stops the workers now; on a scheduler's node with a grace period, a
    SIGTERM asks for a preemption first and arms a timer for the grace period, at whose end
    the workers are stopped as that SIGTERM would have."""
    for sig in AGENT_SIGNALS:
        signal.signal(sig, _stop)
    if not plan.sigterm_preempts or not plan.preemption_grace:
        return

    def preempt(signum: int, frame: FrameType | None) -> None:
        request_preemption(plan.job_dir, plan.preemption_grace, by=host.name)
        signal.signal(signal.SIGALRM, lambda _, f: _stop(signal.SIGTERM, f))
        if signal.getitimer(signal.ITIMER_REAL)[0] == 0:  # a second SIGTERM keeps the deadline
            signal.setitimer(signal.ITIMER_REAL, plan.preemption_grace)

    signal.signal(signal.SIGTERM, preempt)


def _explain(error: Exception, plan: Plan, endpoint: str) -> str:
    """What went wrong, naming the rendezvous endpoint and the underlying cause."""
    text = f"{type(error).__name__}: {error}"
    if error.__cause__ is not None:
        text += f" (cause: {str(error.__cause__)[:300]})"
    if isinstance(error, RendezvousError):
        text = f"rendezvous ({plan.rdzv_backend} at {endpoint}) failed: {text}"
        if plan.rdzv_help:
            text += f"; {plan.rdzv_help}"
    return text


def run_host(
    plan: Plan, host: HostPlan, rdzv_port: str, workers_env: dict[str, str], pool: WarmPool | None
) -> int:
    """Join the rendezvous, run the host's workers and write its result; 0 if it succeeded."""
    endpoint = rendezvous.endpoint(plan, rdzv_port)
    # The agent serves the workers' store itself, on the host's address (see rendezvous).
    os.environ[rendezvous.SHARED_STORE_OPT_OUT] = "1"
    handler = None
    try:
        _install_stop_handlers(plan, host)
        handler = rendezvous.create_handler(plan, host, endpoint)
        planned = (
            functools.partial(rendezvous.join_planned, plan, host, endpoint)
            if plan.planned_first_round
            else None
        )
        spec = agent_spec(plan, host, endpoint, workers_env)
        agent = HostAgent(spec, handler, pool, planned)
        result = agent.run()
        # What the report notes (the launcher sees this host succeed).
        failures = [*result.failures, *agent.finished_then_crashed()]
        result = AgentResult(result.state, failures, result.message)
    except StopSignal as e:  # before the agent ran
        result = AgentResult(HostState.STOPPED, [], str(e))
    except Exception as e:  # rendezvous timeouts and the like: report, don't just die
        logger.exception("agent of %s failed", host.name)
        result = AgentResult(HostState.ERROR, [], _explain(e, plan, endpoint))
    finally:
        for sig in AGENT_SIGNALS:  # what is left is this host's own cleanup
            signal.signal(sig, signal.SIG_IGN)
        if handler is not None:
            handler.shutdown()
        if pool is not None:
            pool.close()
    write_result(host.dir, result)
    # A preempted host did what was asked: the launcher tells the job's outcome.
    return 0 if result.state in (HostState.SUCCEEDED, HostState.PREEMPTED) else 1
