"""The job an MPIJob's launcher pod runs, as its manifest carries it (:data:`JOB_ENV`): the
validated spec, the MPIJob's name, the processes per worker and the workers' names as a
pattern, a few KB whatever the number of workers. The launcher
(:mod:`tenter.launch.backends.kubernetes.mpi_launcher`) makes the plan and mpirun's command from it,
with the mpi backend's own pure functions."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from tenter.contract.fabric import CLUSTER_NIC
from tenter.contract.placeholders import MASTER_PORT
from tenter.contract.plan import Plan
from tenter.contract.planner import make_plan
from tenter.launch.backends.mpirun import mpirun_argv
from tenter.spec import JobSpec

POD_IP_ENV = "TENTER_POD_IP"
"""The launcher pod's address, from the downward API (``status.podIP``)."""
JOB_ENV = "TENTER_MPIJOB"
"""The job the launcher runs, as JSON (:func:`job_json`)."""


@dataclasses.dataclass(frozen=True)
class MpiJobLaunch:
    """What an MPIJob's launcher needs to make the plan and the mpirun command."""

    spec: JobSpec
    """The spec as the pods see it (code at ``kubernetes.working_dir``)."""
    name: str
    """The MPIJob's name: the job id."""
    procs: int
    """Processes (slots) per worker."""
    workers: str
    """Worker ``i``'s host name, with ``{i}`` for its index (the MPI Operator's names)."""
    tenter_home: str
    """tenter's home in the pods: the job directory lies under it."""

    def hosts(self) -> list[str]:
        return [self.workers.format(i=i) for i in range(self.spec.instance_count)]

    def plan(self, master_port: int) -> Plan:
        python = self.spec.kubernetes.python
        plan = make_plan(
            self.spec,
            self.name,
            Path(self.tenter_home),
            python,
            addrs=self.hosts(),
            network_interface=CLUSTER_NIC,
        )
        return plan.resolved({MASTER_PORT: master_port})

    def mpirun(self, plan: Plan, master_addr: str, master_port: int, plan_url: str) -> list[str]:
        return mpirun_argv(
            plan,
            self.hosts(),
            self.procs,
            self.spec.kubernetes.python,
            user_options=self.spec.mpi_options(),
            network_interface=CLUSTER_NIC,
            master_addr=master_addr,
            master_port=str(master_port),
            # Containers run as root unless the image says otherwise; not a privilege.
            allow_run_as_root=True,
            agent_store=True,
            plan_source=plan_url,
        )


def job_json(job: MpiJobLaunch) -> str:
    """The value of :data:`JOB_ENV` in the launcher's manifest (only what differs from the
    spec's defaults: the launcher validates it again with the same model)."""
    fields: dict[str, Any] = dataclasses.asdict(job)
    fields["spec"] = job.spec.model_dump(mode="json", exclude_defaults=True)
    return json.dumps(fields, separators=(",", ":"))


def parse_job(text: str) -> MpiJobLaunch:
    """:data:`JOB_ENV`'s value as the launcher's job; ValueError names what is wrong."""
    try:
        fields = json.loads(text)
        spec = JobSpec.model_validate(fields.pop("spec"))
        return MpiJobLaunch(spec=spec, **fields)
    except (ValueError, KeyError, TypeError, AttributeError, ValidationError) as e:
        raise ValueError(f"{JOB_ENV} is not a job tenter rendered: {e}") from None
