"""The local backend: ``instance_count`` simulated hosts on this machine, each one tenter agent
(:mod:`tenter.launch.agent`: torch elastic) with its own name, loopback address and SageMaker
directory, supervised by :class:`~tenter.launch.local.job.LocalJob`."""

from __future__ import annotations

import dataclasses

from tenter.contract.plan import Plan, make_plan
from tenter.jobdir.lookup import tenter_home
from tenter.launch.api import python_executable
from tenter.launch.isolation import preflight
from tenter.launch.local.job import LocalJob
from tenter.launch.supervised import SupervisedBackend
from tenter.spec import JobSpec

KEEP_ALIVE_S = 1
"""Simulated hosts share a loopback: heartbeats are free, and a lost host is then dropped in
3 s instead of torch's default 15 s. (A choice for this machine only: cluster backends keep
torch's interval.)"""


class LocalBackend(SupervisedBackend):
    name = "local"

    def dryrun(self, spec: JobSpec, job_id: str) -> Plan:
        plan = make_plan(spec, job_id, tenter_home(), python_executable())
        return dataclasses.replace(plan, keep_alive_s=KEEP_ALIVE_S)

    def check_ready(self, plan: Plan) -> None:
        if plan.isolation == "network":
            preflight.check_machine()

    def supervisor(self, plan: Plan) -> LocalJob:
        return LocalJob(plan)
