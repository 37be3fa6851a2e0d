"""The ray backend: ``tenter run --backend ray job.yaml`` runs one tenter agent per host, each
in a Ray actor on a bundle of the job's placement group (one per host, on distinct nodes),
supervised from this machine as the local backend supervises its agents: the job directory,
the store, the watchers and the summary are the same
(:class:`~tenter.launch.backends.ray.job.RayJob`).

Without ``ray.address``, tenter starts a Ray cluster on this machine for the job, one node per
host, and stops it when the job ends (:mod:`tenter.launch.backends.ray.cluster`). With
``--detach``, the launcher runs as a Ray job (:mod:`tenter.launch.backends.ray.submit`)."""

from __future__ import annotations

import dataclasses
import importlib.util
from typing import TYPE_CHECKING

from tenter.errors import MissingToolError
from tenter.jobdir.lookup import tenter_home
from tenter.launch.api import python_executable
from tenter.launch.backends.ray.cluster import START_TIMEOUT_S, STOP_TIMEOUT_S
from tenter.launch.launcher.supervised import SupervisedBackend

if TYPE_CHECKING:
    from tenter.contract.plan import Plan
    from tenter.launch.backends.ray.job import RayJob
    from tenter.spec import JobSpec


class RayBackend(SupervisedBackend):
    name = "ray"
    daemon_module = "tenter.launch.backends.ray.submit"
    # It may still be starting the local cluster when cancelled, and then stops it.
    daemon_stop_s = START_TIMEOUT_S + STOP_TIMEOUT_S

    def dryrun(self, spec: JobSpec, job_id: str) -> Plan:
        from tenter.contract.planner import make_plan
        from tenter.launch.backends.ray.setup import SETUP_FILE, ray_setup
        from tenter.launch.backends.ray.submit import SUBMIT_FILE, ray_submission

        python = python_executable()
        # The ranks' variables in the runtime_env are in the plan with the spec's others.
        environment = {**spec.ray.runtime_env.env_vars, **spec.environment}
        plan = make_plan(
            spec.model_copy(update={"environment": environment}), job_id, tenter_home(), python
        )
        setup = ray_setup(spec, [host.gpus or [] for host in plan.hosts], job_id, python)
        submission = ray_submission(spec, job_id, plan.job_dir, python)
        files = {SETUP_FILE: setup.to_json(), SUBMIT_FILE: submission.to_json()}
        return dataclasses.replace(plan, files=files)

    def check_ready(self, plan: Plan) -> None:
        if importlib.util.find_spec("ray") is None:
            raise MissingToolError(
                "backend",
                "ray: the ray package is not installed in this Python",
                "pip install 'tenter[ray]' (ray>=2.52)",
            )

    def supervisor(self, plan: Plan) -> RayJob:
        from tenter.launch.backends.ray.job import RayJob

        return RayJob(plan)
