"""A Ray job: the placement group, one actor per host running its agent, and the launcher's
usual watch over them (:class:`~tenter.launch.launcher.supervisor.Supervisor`).

Ray's driver connection lives in the launcher (``tenter run``, or a detached job's Ray job,
:mod:`tenter.launch.backends.ray.entrypoint`, whose local cluster its owner stops). Whatever
the end (success, failure, Ctrl-C, cancel), :meth:`RayJob.release` removes the placement
group, kills the actors, disconnects, and stops the local cluster it started."""

from __future__ import annotations

import contextlib
import os
import signal
from typing import TYPE_CHECKING, Any

from tenter.contract.plan import Plan
from tenter.errors import BackendRefusedError
from tenter.jobdir import layout
from tenter.jobdir.results import JobState
from tenter.launch.backends.ray.cluster import START_TIMEOUT_S, LocalCluster
from tenter.launch.backends.ray.drain import DrainWatch, preempt_on_drain
from tenter.launch.backends.ray.host import HostAgent
from tenter.launch.backends.ray.setup import SETUP_FILE, RaySetup
from tenter.launch.diagnosis import root_cause
from tenter.launch.launcher.supervisor import (
    Supervisor,
    agent_argv,
    goes_on_without_one,
    lose_host,
)
from tenter.launch.shared.processes import AGENT_REPORT_S, STOP_GRACE_S

if TYPE_CHECKING:
    from ray.util.placement_group import PlacementGroup

NODE_LOST = -signal.SIGKILL
"""The status of a host whose actor died, as if its machine had: killed, not reporting."""
NODE_LOST_CAUSE = "its Ray node was lost"


class RayJob(Supervisor):
    def __init__(self, plan: Plan, address: str | None = None) -> None:
        """``address``: the cluster this launcher runs in (a detached job's Ray job), instead of
        the plan's."""
        super().__init__(plan)
        self.setup = RaySetup.from_json(plan.files[SETUP_FILE])
        self.address = address or self.setup.address
        self.cluster: LocalCluster | None = None
        self.group: PlacementGroup | None = None
        self.actors: list[Any] = []
        self.runs: list[Any] = []
        """Each host's ``HostAgent.run`` (an ObjectRef): its agent's exit status."""
        self.lost: set[int] = set()
        """Indexes of hosts whose node was lost while the job went on without them."""
        self.drains: DrainWatch | None = None

    def start_processes(self) -> None:
        logs = layout.logs_dir(self.plan.job_dir)
        address = self.address
        if address is None:
            self.cluster = LocalCluster.start(self.setup.nodes, logs)
            address = self.cluster.address
            # For this process's driver; before ray's import, which reads its settings.
            os.environ.update(self.cluster.auth_env)
        import ray

        _connect(ray, address)
        self.group = self._placement_group(ray)
        self._start_agents(ray, self.group)
        self.drains = DrainWatch(ray, self.group, [host.name for host in self.plan.hosts])

    def on_tick(self) -> None:
        preempt_on_drain(self.drains, self.preemption)

    def _placement_group(self, ray: Any) -> PlacementGroup:
        from ray.util.placement_group import placement_group

        group: PlacementGroup = placement_group(
            self.setup.bundles, strategy=self.setup.strategy, name=self.setup.name
        )
        ready, _ = ray.wait([group.ready()], timeout=START_TIMEOUT_S)
        if not ready:
            self.group = group  # release() removes it
            raise BackendRefusedError(
                "ray.resources_per_host",
                f"ray: the cluster cannot place {len(self.setup.bundles)} bundles "
                f"{self.setup.bundles} on distinct nodes ({self.setup.strategy}) within "
                f"{START_TIMEOUT_S:.0f} s; it has {ray.cluster_resources()} on "
                f"{len(ray.nodes())} nodes",
                "ask for fewer resources per host or fewer hosts, or add nodes",
            )
        return group

    def _start_agents(self, ray: Any, group: PlacementGroup) -> None:
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        actor_class = ray.remote(HostAgent)
        for host in self.plan.hosts:
            where = PlacementGroupSchedulingStrategy(group, host.index)
            gpus = self.setup.bundles[host.index].get("GPU", 0)  # the host's, in its bundle
            actor = actor_class.options(
                num_cpus=0,
                num_gpus=gpus,
                max_concurrency=2,
                scheduling_strategy=where,
                runtime_env=self.setup.runtime_env,
            ).remote()
            argv = agent_argv(self.plan, host, self.rdzv_port)
            log = layout.logs_dir(self.plan.job_dir) / layout.agent_log(host.name)
            self.actors.append(actor)
            self.runs.append(
                actor.run.remote(argv, self.plan.host_env(host), self.plan.cwd, str(log))
            )

    def check_processes(self) -> JobState:
        """running, succeeded or failed; a host whose node was lost (its actor died with its
        raylet) is a lost host, as a killed agent is on the local backend."""
        import ray

        active = [i for i in range(len(self.runs)) if i not in self.lost]
        ready, _ = ray.wait([self.runs[i] for i in active], num_returns=len(active), timeout=0)
        done = {id(ref) for ref in ready}
        for i in active:
            if id(self.runs[i]) not in done or (code := _status(ray, self.runs[i])) == 0:
                continue
            host = self.plan.hosts[i]
            if code == NODE_LOST and goes_on_without_one(self.plan, len(active)):
                self.lost.add(i)
                lose_host(self, host.name, NODE_LOST_CAUSE, len(active) - 1)
                return JobState.RUNNING
            if code == NODE_LOST:
                log = str(layout.logs_dir(self.plan.job_dir) / layout.agent_log(host.name))
                failure = root_cause.host_lost(host, None, code, log, NODE_LOST_CAUSE)
                self.host_failures.append(failure)
            return JobState.FAILED
        return JobState.SUCCEEDED if len(ready) == len(active) else JobState.RUNNING

    def host_dirs(self) -> list[str]:
        return [h.dir for i, h in enumerate(self.plan.hosts) if i not in self.lost]

    def stop_processes(self) -> None:
        import ray

        for actor in self.actors:
            with contextlib.suppress(ray.exceptions.RayError):
                actor.signal.remote(signal.SIGTERM)
        # The agents give their workers the grace period, then report: wait for that.
        ray.wait(self.runs, num_returns=len(self.runs), timeout=STOP_GRACE_S + AGENT_REPORT_S)

    def release(self) -> None:
        try:
            _leave_cluster(self.group, self.actors)
        finally:
            if self.cluster is not None:
                self.cluster.stop()


def _status(ray: Any, ref: Any) -> int:
    """An agent's exit status; :data:`NODE_LOST` if its actor died (with its node)."""
    try:
        code: int = ray.get(ref)
    except ray.exceptions.RayError:
        return NODE_LOST
    return code


def _connect(ray: Any, address: str) -> None:
    """Ray's driver, without its signal handlers: SIGTERM and SIGINT stay tenter's (a
    preemption, Ctrl-C)."""
    kept = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        ray.init(address=address, log_to_driver=False, logging_level="WARNING")
    except ConnectionError as e:
        raise BackendRefusedError(
            "ray.address",
            f"ray: cannot connect to the cluster at {address}: {e}",
            "check that its head runs (`ray status --address ADDRESS`) and that its token "
            "authentication settings (RAY_AUTH_MODE, RAY_AUTH_TOKEN_PATH) are this process's",
        ) from None
    finally:
        for signum, handler in kept.items():
            signal.signal(signum, handler)


def _leave_cluster(group: PlacementGroup | None, actors: list[Any]) -> None:
    """Remove the job's placement group and actors, and disconnect (nothing if never
    connected)."""
    import ray

    if not ray.is_initialized():
        return
    try:
        for actor in actors:
            with contextlib.suppress(ray.exceptions.RayError):
                ray.kill(actor)
        if group is not None:
            with contextlib.suppress(ray.exceptions.RayError):
                ray.util.remove_placement_group(group)
    finally:
        ray.shutdown()
