"""``python -m tenter.launch.launcher.daemon BACKEND JOB_DIR``: the launcher of a detached job
(``tenter run --detach`` on the local and mpi backends).

It runs the job's :class:`~tenter.launch.launcher.supervisor.Supervisor` as ``tenter run`` would in
its own process, and exits with the job's exit code once ``summary.json`` is written. SIGTERM,
SIGINT and SIGHUP (``tenter cancel``) stop the job the way Ctrl-C does.
"""

from __future__ import annotations

import sys

from tenter.contract.plan import read_plan
from tenter.launch.api import get_backend
from tenter.launch.launcher.supervised import SupervisedBackend
from tenter.launch.shared.signals import stop_requests


def main(argv: list[str]) -> int:
    backend_name, job_dir = argv
    backend = get_backend(backend_name)
    assert isinstance(backend, SupervisedBackend), f"{backend_name} jobs do not detach this way"
    plan = read_plan(job_dir)
    job = backend.supervisor(plan)
    with stop_requests() as stop:
        job.start()
        return job.wait(stop).exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
