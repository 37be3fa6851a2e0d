"""``tenter run --backend ray --detach``: the job's launcher runs as a Ray job, submitted with
Ray's job API (``ray job submit``'s :class:`~ray.job_submission.JobSubmissionClient`), so that
it outlives the submitting shell.

What is submitted is in the plan (``ray-job.json``, :class:`RaySubmission`): the entrypoint
(:mod:`tenter.launch.backends.ray.entrypoint`, this job's launcher, which joins the cluster it
runs in), the job's ``runtime_env``, and the options the local cluster's head adds to serve the
job API (Ray's dashboard, on loopback only).

``python -m tenter.launch.backends.ray.submit ray JOB_DIR`` is the detached job's own process
on this machine (what ``tenter status`` sees running and ``tenter cancel`` signals, as a
local job's launcher): it starts the local cluster (none for a given ``ray.address``), submits
the Ray job, waits for its end, deletes it from the cluster, and stops the cluster. The
launcher's output goes to the job's ``logs/launcher.log``, after the owner's. A stop request
(SIGINT, SIGHUP: cancel; SIGTERM: preempt) is passed to the launcher in the job directory
(``control/ray-job-stop``), where the entrypoint reads it: Ray's own ``stop_job`` sends
SIGTERM to the launcher and to every process it started at once, which is neither a cancel
nor an orderly preemption; it is the last resort here, past the launcher's own stop time.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tenter.contract.placeholders import resolve
from tenter.contract.plan import Plan, read_plan
from tenter.errors import BackendRefusedError, ExitCode
from tenter.jobdir import control, layout
from tenter.jobdir.results import read_result
from tenter.launch.backends.ray.cluster import LOOPBACK, START_TIMEOUT_S, LocalCluster, free_port
from tenter.launch.backends.ray.setup import SETUP_FILE, RaySetup
from tenter.launch.shared.console import say
from tenter.launch.shared.processes import CANCEL_TIMEOUT_S
from tenter.launch.shared.signals import StopRequest, is_preemption, stop_requests

if TYPE_CHECKING:
    from ray.job_submission import JobSubmissionClient

    from tenter.spec import JobSpec

SUBMIT_FILE = "ray-job.json"
DASHBOARD_PORT = "${ray_dashboard_port}"
RAY_DASHBOARD_PORT = 8265
"""Ray's default dashboard port: the job API of a given cluster (``ray.address``'s host)."""
STOP_FILE = "ray-job-stop"
"""In the job's control directory: ``cancel`` or ``preempt``, the stop the launcher is asked."""
DASHBOARD_OPTIONS = ["--include-dashboard=true", "--dashboard-host", LOOPBACK, "--dashboard-port"]
POLL_S = 0.5
ENDED = ("SUCCEEDED", "FAILED", "STOPPED")


@dataclass(frozen=True)
class RaySubmission:
    """What ``--detach`` submits, as the plan shows it."""

    job_api: str
    """Ray's job API (its dashboard); ``${ray_dashboard_port}`` until the local cluster runs."""
    head_options: list[str]
    """Added to the local cluster's head's ``ray start``: the dashboard, bound to loopback."""
    submission_id: str
    entrypoint: list[str]
    runtime_env: dict[str, Any]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> RaySubmission:
        return cls(**json.loads(text))


def ray_submission(spec: JobSpec, job_id: str, job_dir: str, python: str) -> RaySubmission:
    local = spec.ray.address is None
    host = LOOPBACK if local else (spec.ray.address or "").rsplit(":", 1)[0]
    port = DASHBOARD_PORT if local else str(RAY_DASHBOARD_PORT)
    return RaySubmission(
        job_api=f"http://{host}:{port}",
        head_options=[*DASHBOARD_OPTIONS, DASHBOARD_PORT] if local else [],
        submission_id=job_id,
        entrypoint=[python, "-m", "tenter.launch.backends.ray.entrypoint", job_dir],
        runtime_env=spec.ray.runtime_env.model_dump(exclude_defaults=True),
    )


def request_stop(job_dir: str, preempt: bool) -> None:
    control.made_control_dir(job_dir)
    layout.write_atomic(
        control.control_dir(job_dir) / STOP_FILE, "preempt" if preempt else "cancel"
    )


def requested_stop(job_dir: str) -> bool | None:
    """None: no stop asked; else whether it is a preemption."""
    path = control.control_dir(job_dir) / STOP_FILE
    return path.read_text() == "preempt" if path.exists() else None


def append_output(job_dir: str) -> None:
    """This process's stdout and stderr at the end of the job's ``logs/launcher.log``, which
    the owner and the launcher both write."""
    log = os.open(layout.logs_dir(job_dir) / layout.LAUNCHER_LOG, os.O_WRONLY | os.O_APPEND)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
        os.dup2(log, stream.fileno())
    os.close(log)


def main(argv: list[str]) -> int:
    _, job_dir = argv
    append_output(job_dir)
    plan = read_plan(job_dir)
    setup = RaySetup.from_json(plan.files[SETUP_FILE])
    submission = RaySubmission.from_json(plan.files[SUBMIT_FILE])
    cluster = None
    with stop_requests() as stop:
        try:
            job_api = submission.job_api
            if setup.address is None:
                port = str(free_port())
                head = [resolve(a, {DASHBOARD_PORT: port}) for a in submission.head_options]
                nodes = [setup.nodes[0] + head, *setup.nodes[1:]]
                cluster = LocalCluster.start(nodes, layout.logs_dir(job_dir))
                job_api = resolve(job_api, {DASHBOARD_PORT: port})
                os.environ.update(cluster.auth_env)  # before ray's import, which reads it
            _run(plan, submission, job_api, stop)
        finally:
            if cluster is not None:
                cluster.stop()
    result = read_result(Path(job_dir))
    return ExitCode.JOB_FAILED if result is None else result.exit_code


def _run(plan: Plan, submission: RaySubmission, job_api: str, stop: StopRequest) -> None:
    client = _client(job_api)
    sid = submission.submission_id
    client.submit_job(
        entrypoint=shlex.join(submission.entrypoint),
        submission_id=sid,
        runtime_env={**submission.runtime_env, "env_vars": _job_env(plan, submission)},
    )
    say(f"submitted Ray job {sid} to {job_api}")
    try:
        _wait(client, sid, plan, stop)
    finally:
        client.delete_job(sid)


def _job_env(plan: Plan, submission: RaySubmission) -> dict[str, str]:
    """The launcher's variables in its Ray job: the spec's ``env_vars``, and the time Ray
    gives it to stop after its ``stop_job`` (3 s by default) raised to the launcher's own."""
    wait_s = CANCEL_TIMEOUT_S + plan.preemption_grace
    return {
        **submission.runtime_env.get("env_vars", {}),
        "RAY_JOB_STOP_WAIT_TIME_S": str(int(wait_s)),
    }


def _client(job_api: str) -> JobSubmissionClient:
    """A client of the job API once it answers (the dashboard starts after the head's GCS).
    A stop asked meanwhile still submits: the launcher then stops at once and writes the
    job's summary (interrupted), as a local job's does."""
    from ray.job_submission import JobSubmissionClient

    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            return JobSubmissionClient(job_api)
        except ConnectionError as e:
            if time.monotonic() > deadline:
                raise BackendRefusedError(
                    "ray.address",
                    f"ray: Ray's job API at {job_api} did not answer within "
                    f"{START_TIMEOUT_S:.0f} s: {e}",
                    "check that the cluster runs its dashboard (ray[default] installed)",
                ) from None
        time.sleep(POLL_S)


def _wait(client: JobSubmissionClient, sid: str, plan: Plan, stop: StopRequest) -> None:
    """Until the Ray job ends; a stop is passed on to its launcher, and past the launcher's
    own stop time, Ray stops the job."""
    stop_by = None
    while str(client.get_job_status(sid)) not in ENDED:
        if stop.is_set() and stop_by is None:
            request_stop(plan.job_dir, is_preemption(stop))
            stop_by = time.monotonic() + CANCEL_TIMEOUT_S + plan.preemption_grace
        elif stop_by is not None and time.monotonic() > stop_by:
            client.stop_job(sid)
            stop_by = float("inf")
        time.sleep(POLL_S)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
