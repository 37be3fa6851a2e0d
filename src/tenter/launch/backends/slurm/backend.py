"""The slurm backend: ``tenter run --backend slurm job.yaml`` submits the job with ``sbatch``.

The batch script (:mod:`~tenter.launch.backends.slurm.script`) asks for the job's nodes, tasks per
node, CPUs per task, GPUs per node and time limit, and runs one ``srun`` step that starts one tenter
agent per node (:mod:`~tenter.launch.backends.slurm.node`).

``wait`` follows the job: its state with ``squeue`` (``scontrol show job`` once it left the
queue; ``sacct`` after Slurm forgot it, when accounting is configured); the job's exit code is
0, 1 for a failed rank (the root cause in the summary), 124 for Slurm's TIMEOUT, 130 when
cancelled. A Slurm job outlives ``tenter run`` anyway: ``--detach`` returns after ``sbatch``.
An answer Slurm cannot give for a while (a busy or restarting slurmctld) is retried, never
taken as the job's end.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import threading
import time
from pathlib import Path

from tenter.contract.placeholders import SLURM_NIC, slurm_node
from tenter.contract.plan import Plan, read_plan
from tenter.contract.planner import make_plan
from tenter.errors import BackendRefusedError, ExitCode, MissingToolError
from tenter.jobdir import control, layout, published
from tenter.jobdir.handle import JobHandle
from tenter.jobdir.lookup import tenter_home
from tenter.jobdir.results import JobResult
from tenter.launch.api import JobStatus, python_executable, scheduler_preempts
from tenter.launch.backends.slurm.script import SCRIPT, sbatch_script
from tenter.launch.diagnosis import root_cause
from tenter.launch.launcher import preemption
from tenter.launch.launcher.output import create_job_dir, discard_job_dir
from tenter.launch.shared.console import ConsoleTail, say
from tenter.spec import JobSpec, lookup

POLL_S = 0.5
ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING")
"""squeue's states of a job that has not ended."""
EXIT_BY_STATE = {
    "TIMEOUT": ExitCode.MAX_RUN,
    "CANCELLED": ExitCode.INTERRUPTED,
    "DEADLINE": ExitCode.MAX_RUN,
}
UNKNOWN_GRACE_S = 120.0
"""How long Slurm may fail to tell a job's state (slurmctld restarting, a slow answer) before
``wait`` gives up on it."""
MAX_RETRY_DELAY_S = 8.0
"""The longest pause between two questions to a Slurm that does not answer."""
COMMAND_TIMEOUT_S = 30.0
"""One squeue/scontrol/sacct call; a slower one counts as no answer."""


class SlurmBackend:
    name = "slurm"
    reports_progress = True  # the job directory is on the cluster's shared file system

    def dryrun(self, spec: JobSpec, job_id: str) -> Plan:
        itype = lookup(spec.instance_type)
        assert itype is not None, "the spec check rejects unknown instance types"
        # In a container (pyxis), the agents and ranks run the image's Python.
        python = spec.slurm.container_python if spec.slurm.container_image else python_executable()
        plan = make_plan(
            spec,
            job_id,
            tenter_home(),
            python,
            addrs=[slurm_node(i) for i in range(spec.instance_count)],
            network_interface=spec.slurm.network_interface or SLURM_NIC,
        )
        script = Path(plan.job_dir) / SCRIPT
        return dataclasses.replace(
            plan,
            # Secrets reach the nodes by name in the exported environment (a site's
            # SBATCH_EXPORT=NONE would drop them; the command line overrides it).
            launcher=[
                "sbatch",
                "--parsable",
                *(["--export=ALL"] if plan.secrets else []),
                str(script),
            ],
            files={SCRIPT: sbatch_script(plan, spec, python)},
        )

    def submit(self, plan: Plan, *, detach: bool = False) -> JobHandle:
        """Create the job directory and submit the script (a Slurm job always outlives the
        process that submitted it: ``detach`` changes nothing here)."""
        require_sbatch("backend")
        if plan.replica_groups:  # with this Python's torch, which the nodes run too
            from tenter.launch.compat import refuse_torchft_on_old_torch  # imports torch

            refuse_torchft_on_old_torch()
        create_job_dir(plan)
        for name, text in plan.files.items():
            (Path(plan.job_dir) / name).write_text(text)
        done = subprocess.run(plan.launcher, capture_output=True, text=True, cwd=plan.cwd)
        if done.returncode != 0:
            discard_job_dir(plan)  # nothing was submitted: leave nothing behind
            raise BackendRefusedError(
                "backend",
                f"slurm: sbatch rejected the job: {done.stderr.strip()}",
                "`tenter plan --backend slurm` prints the script's #SBATCH lines; compare them "
                "with the partition's limits (`sinfo -o '%P %D %c %m %G %l'`): a GPU count "
                "(instance_type), node count (instance_count) or time limit (max_run) it cannot "
                "give, or the partition and account your cluster expects (slurm.partition, "
                "slurm.account; --partition, --account)",
            )
        slurm_id = done.stdout.strip().split(";")[0]
        handle = JobHandle(
            self.name, plan.job_id, plan.job_dir, slurm_id, {"submitted": str(time.time())}
        )
        handle.write()
        say(f"submitted as Slurm job {slurm_id}")
        return handle

    def wait(self, handle: JobHandle, stop: threading.Event) -> JobResult:
        """Poll until the job ends; ``stop`` cancels it (and still waits for its end)."""
        cancelled = False
        unknown_since: float | None = None
        delay = POLL_S
        while True:
            state = slurm_state(handle.scheduler_id)
            if state.name == "UNKNOWN":
                if unknown_since is None:
                    unknown_since = time.monotonic()
                    say(
                        f"Slurm does not tell job {handle.scheduler_id}'s state{state.detail}; "
                        f"asking again for up to {UNKNOWN_GRACE_S:.0f} s"
                    )
                if time.monotonic() - unknown_since > UNKNOWN_GRACE_S:
                    break
                delay = min(delay * 2, MAX_RETRY_DELAY_S)  # a restarting slurmctld: back off
            elif state.name not in ACTIVE:
                break
            else:
                if unknown_since is not None:
                    say(f"Slurm answers again: job {handle.scheduler_id} is {state.name}")
                unknown_since, delay = None, POLL_S
            if stop.is_set() and not cancelled:
                subprocess.run(["scancel", handle.scheduler_id], capture_output=True)
                cancelled = True
            if cancelled:
                time.sleep(delay)
            else:
                stop.wait(delay)  # a stop request cancels at once, not after the back-off
        duration = time.time() - float(handle.details.get("submitted", time.time()))
        return _finish(read_plan(handle.job_dir), state, duration)

    def status(self, handle: JobHandle) -> JobStatus:
        state = slurm_state(handle.scheduler_id)
        text = f"{state.name} (Slurm job {handle.scheduler_id}{state.detail})"
        if control.hang_stopped_at(handle.job_dir) is not None:  # a detached job's end
            text = f"HANG, stopped by its hang watch ({layout.HANG_REPORT_FILE}): Slurm: {text}"
        return JobStatus(state.name in ACTIVE, text)

    def logs(
        self, handle: JobHandle, ranks: list[int] | None, tag: bool, follow: bool
    ) -> ConsoleTail:
        # The job directory is on the cluster's shared file system.
        return ConsoleTail(handle.job_dir, ranks, tag)

    def cancel(self, handle: JobHandle) -> str:
        done = subprocess.run(["scancel", handle.scheduler_id], capture_output=True, text=True)
        if done.returncode != 0:
            raise BackendRefusedError(
                "JOB",
                f"scancel {handle.scheduler_id} failed: {done.stderr.strip()}",
                f"check the job with `squeue -j {handle.scheduler_id}`; scancel it as its owner",
            )
        return f"cancelled Slurm job {handle.scheduler_id}"

    def preempt(self, handle: JobHandle) -> str:
        raise scheduler_preempts(self.name, handle.job_id)


def require_sbatch(where: str) -> None:
    """MissingToolError, naming ``where`` (the field or flag that chose Slurm), unless sbatch
    is on PATH."""
    if shutil.which("sbatch") is None:
        raise MissingToolError(
            where,
            "slurm: sbatch is not on PATH",
            "run tenter on a Slurm login node, or install the Slurm client (Debian: "
            "apt-get install slurm-client) configured for your cluster (SLURM_CONF)",
        )


def _run(argv: list[str]) -> subprocess.CompletedProcess[str] | None:
    """A Slurm client call; None when it did not answer in time."""
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None


@dataclasses.dataclass(frozen=True)
class SlurmState:
    name: str
    """Slurm's state (RUNNING, COMPLETED, FAILED, TIMEOUT, CANCELLED...) or UNKNOWN."""
    exit_code: int | None = None
    detail: str = ""


def _fields(text: str) -> dict[str, str]:
    return dict(f.split("=", 1) for f in text.split() if "=" in f)


def slurm_state(slurm_id: str) -> SlurmState:
    """squeue while the job is queued, then scontrol (until MinJobAge), then sacct."""
    queued = _run(["squeue", "-h", "-j", slurm_id, "-o", "%T %r"])
    if queued is None:
        return SlurmState("UNKNOWN", detail=": squeue did not answer")
    if queued.returncode != 0 and "Invalid job id" not in queued.stderr:
        # slurmctld down or restarting: scontrol and sacct would not know better.
        return SlurmState("UNKNOWN", detail=f": squeue failed: {queued.stderr.strip()[:200]}")
    if queued.returncode == 0 and queued.stdout.strip():
        name, _, reason = queued.stdout.strip().partition(" ")
        return SlurmState(name, detail=f": {reason}" if reason not in ("", "None") else "")
    shown = _run(["scontrol", "show", "job", "-o", slurm_id])
    if shown is None:
        return SlurmState("UNKNOWN", detail=": scontrol did not answer")
    if shown.returncode == 0 and "JobState=" in shown.stdout:
        fields = _fields(shown.stdout)
        code, _, sig = fields.get("ExitCode", "0:0").partition(":")
        return SlurmState(fields["JobState"], 128 + int(sig) if sig not in ("", "0") else int(code))
    acct = _run(["sacct", "-n", "-X", "-P", "-j", slurm_id, "-o", "State,ExitCode"])
    if acct is None:
        return SlurmState("UNKNOWN", detail=": sacct did not answer")
    if acct.returncode == 0 and acct.stdout.strip():
        name, _, code = acct.stdout.strip().splitlines()[0].partition("|")
        return SlurmState(name.split()[0], int(code.partition(":")[0] or 0))
    why = (acct.stderr or acct.stdout).strip()
    if "accounting storage is disabled" in why:
        why = (
            "Slurm forgot the job (MinJobAge) and accounting is not configured "
            "(AccountingStorageType), so sacct cannot tell; its logs are in the job directory"
        )
    return SlurmState("UNKNOWN", detail=f": {why}")


def _finish(plan: Plan, state: SlurmState, duration: float) -> JobResult:
    """The job's result from its files (the agents' reports and error files) and Slurm's
    final state; writes summary.json and each host's output/success|failure."""
    # The job's hang watch (the first node's: tenter.launch.backends.slurm.node) stopped it.
    hung_at = control.hang_stopped_at(plan.job_dir)
    failures, agent_errors, crashed_at_exit = root_cause.collect_failures(plan, hung_at)
    code = 0 if state.name == "COMPLETED" else EXIT_BY_STATE.get(state.name, ExitCode.JOB_FAILED)
    if code == ExitCode.JOB_FAILED and crashed_at_exit and not (failures or agent_errors):
        code = 0  # every rank that "failed" had finished its script
    extra = [f"Slurm job state: {state.name}{state.detail}", *agent_errors]
    if hung_at is not None and code == ExitCode.JOB_FAILED:
        code = ExitCode.HANG
    report = Path(plan.job_dir) / layout.HANG_REPORT_FILE
    if report.exists():  # its last hang's, whether it stopped the job or restarted its ranks
        extra.insert(0, report.read_text().rstrip())
    # Slurm's SIGTERM (scancel, a preemption, --signal before the time limit): the agents
    # asked their ranks to stop after a final checkpoint.
    request = control.preemption_request(plan.job_dir)
    stopped = bool(control.preempted_ranks(plan.job_dir)) or state.name != "COMPLETED"
    if request is not None and stopped and not failures:
        code, line = preemption.outcome(plan, float(request["time"]))
        extra.insert(0, line)
    outcome = root_cause.Outcome(
        exit_code=code,
        duration_s=duration,
        interrupted=code == ExitCode.INTERRUPTED,
        rdzv_endpoint=_rdzv_endpoint(plan),
        extra=extra,
        notes=crashed_at_exit,
    )
    return root_cause.record_result(plan, failures, outcome)


def _rdzv_endpoint(plan: Plan) -> str:
    """The c10d store's, which the first node publishes once it serves it; an etcd's is the
    spec's."""
    if not plan.serves_store:
        return plan.rdzv_endpoint
    return published.published(plan.job_dir, published.STORE) or ""
