"""The local backend: ``instance_count`` simulated hosts on this machine, each one tenter agent
(:mod:`tenter.launch.agent`, on torch elastic's rendezvous) with its own name, loopback
address and SageMaker directory, supervised by :class:`~tenter.launch.backends.local.job.LocalJob`.

The planner and the supervisor are imported where a job is planned or run: ``tenter status``,
``logs`` and ``cancel`` of a local job need neither (nor the spec's models they import)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from tenter.jobdir.lookup import tenter_home
from tenter.launch.api import python_executable
from tenter.launch.launcher.supervised import SupervisedBackend

if TYPE_CHECKING:
    from tenter.contract.plan import Plan
    from tenter.launch.backends.local.job import LocalJob
    from tenter.spec import JobSpec

KEEP_ALIVE_S = 1
"""Simulated hosts share a loopback: heartbeats are free, and a lost host is then dropped in
3 s instead of torch's default 15 s. (A choice for this machine only: cluster backends keep
torch's interval.)"""
LIGHTHOUSE_HEARTBEAT_MS = 1000
"""For the same reason, a replica group that died leaves torchft's quorum after 1 s instead of
torchft's default 5 s: the other groups' next step waits that long for it."""


class LocalBackend(SupervisedBackend):
    name = "local"

    def dryrun(self, spec: JobSpec, job_id: str) -> Plan:
        from tenter.contract.planner import make_plan

        plan = make_plan(spec, job_id, tenter_home(), python_executable())
        return dataclasses.replace(
            plan, keep_alive_s=KEEP_ALIVE_S, lighthouse_heartbeat_ms=LIGHTHOUSE_HEARTBEAT_MS
        )

    def check_ready(self, plan: Plan) -> None:
        if plan.isolation == "network":
            from tenter.launch.launcher.isolation import preflight

            preflight.check_machine()
        if plan.replica_groups:
            from tenter.launch.compat import refuse_torchft_on_old_torch  # imports torch

            refuse_torchft_on_old_torch()

    def supervisor(self, plan: Plan) -> LocalJob:
        from tenter.launch.backends.local.job import LocalJob
        from tenter.launch.backends.local.replica_groups import ReplicaGroupsJob

        return ReplicaGroupsJob(plan) if plan.replica_groups else LocalJob(plan)
