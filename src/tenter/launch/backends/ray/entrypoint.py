"""``python -m tenter.launch.backends.ray.entrypoint JOB_DIR``: a detached Ray job's launcher,
the entrypoint of the Ray job that :mod:`tenter.launch.backends.ray.submit` submits. It runs
the job's :class:`~tenter.launch.backends.ray.job.RayJob` as ``tenter run`` would, joined to
the cluster it runs in (Ray sets ``RAY_ADDRESS``), and ends with the job's exit code once
``summary.json`` is written, which ends the Ray job. A stop comes through the job directory
(``control/ray-job-stop``: cancel or preempt) or as a signal (Ray's ``stop_job``: SIGTERM)."""

from __future__ import annotations

import os
import signal
import sys
import threading

from tenter.contract.plan import read_plan
from tenter.launch.backends.ray.job import RayJob
from tenter.launch.backends.ray.submit import POLL_S, append_output, requested_stop
from tenter.launch.shared.signals import StopRequest, stop_requests


def main(argv: list[str]) -> int:
    (job_dir,) = argv
    append_output(job_dir)
    job = RayJob(read_plan(job_dir), address=os.environ["RAY_ADDRESS"])
    with stop_requests() as stop:
        threading.Thread(target=_watch_request, args=(job_dir, stop), daemon=True).start()
        job.start()
        return job.wait(stop).exit_code


def _watch_request(job_dir: str, stop: StopRequest) -> None:
    """Turn the job directory's stop request into the signal it stands for."""
    while (preempt := requested_stop(job_dir)) is None:
        if stop.wait(POLL_S):
            return
    stop.on_signal(signal.SIGTERM if preempt else signal.SIGINT)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
