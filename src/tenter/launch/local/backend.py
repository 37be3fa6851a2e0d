"""The local backend: ``instance_count`` simulated hosts on this machine, each one tenter agent
(:mod:`tenter.launch.agent`, on torch elastic's rendezvous) with its own name, loopback
address and SageMaker directory, supervised by :class:`~tenter.launch.local.job.LocalJob`."""

from __future__ import annotations

import dataclasses

from tenter.contract.plan import Plan
from tenter.contract.planner import make_plan
from tenter.jobdir.lookup import tenter_home
from tenter.launch.api import python_executable
from tenter.launch.isolation import preflight
from tenter.launch.local.job import LocalJob
from tenter.launch.local.replica_groups import ReplicaGroupsJob
from tenter.launch.supervised import SupervisedBackend
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
        plan = make_plan(spec, job_id, tenter_home(), python_executable())
        return dataclasses.replace(
            plan, keep_alive_s=KEEP_ALIVE_S, lighthouse_heartbeat_ms=LIGHTHOUSE_HEARTBEAT_MS
        )

    def check_ready(self, plan: Plan) -> None:
        if plan.isolation == "network":
            preflight.check_machine()
        if plan.replica_groups:
            from tenter.launch.compat import refuse_torchft_on_old_torch  # imports torch

            refuse_torchft_on_old_torch()

    def supervisor(self, plan: Plan) -> LocalJob:
        return ReplicaGroupsJob(plan) if plan.replica_groups else LocalJob(plan)
