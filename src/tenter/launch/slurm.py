"""The slurm backend: ``tenter run --backend slurm job.yaml`` submits the job with ``sbatch``.

The sbatch script (``tenter plan --backend slurm`` prints it; the job directory keeps it as
``job.sbatch``) asks for the job's nodes, tasks per node, CPUs per task, GPUs per node and
time limit, and runs one step: ``srun`` starts one tenter agent per node
(``python -m tenter.launch.slurm node PLAN``). That entry point resolves the node's part of
the plan from ``SLURM_NODEID`` and ``SLURM_JOB_NODELIST`` (the plan names nodes
``${slurm_node_<i>}`` until Slurm allocates them) and runs the local backend's per-host agent
(:mod:`tenter.launch.agent`: torch elastic, the same worker contract, error files and logs).
The agents rendezvous (c10d) on the first node of ``SLURM_JOB_NODELIST``, whose entry serves
the store on a port the kernel picks and publishes it in ``rdzv-port`` in the job directory,
which Slurm jobs have on a shared file system anyway (their output paths).

``tenter run`` then follows the job: its state with ``squeue`` (``scontrol show job`` once it
left the queue; ``sacct`` after Slurm forgot it, when accounting is configured), every rank's
log as it is written, and returns the job's exit status: the root cause's, 124 for Slurm's
TIMEOUT, 130 when cancelled. ``--detach`` returns after the submission.
"""

from __future__ import annotations

import dataclasses
import math
import os
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from tenter.launch import layout, report
from tenter.launch.api import JobResult, JobStatus, python_executable
from tenter.launch.jobs import tenter_home
from tenter.launch.local import serve_store, stop_requests
from tenter.launch.plan import LOOPBACK_NIC, RDZV_PORT, Plan, make_plan
from tenter.spec import JobSpec, Problem, SpecError, lookup, processes_per_host

SCRIPT = "job.sbatch"
SLURM_ID_FILE = "slurm-job-id"
PORT_FILE = "rdzv-port"
POLL_S = 0.5
CLUSTER_NIC = "eth0"
ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING")
"""squeue's states of a job that has not ended."""
EXIT_BY_STATE = {"TIMEOUT": 124, "CANCELLED": 130, "DEADLINE": 124}


def node_placeholder(index: int) -> str:
    """The name of node ``index`` of the allocation, until Slurm allocates it."""
    return f"${{slurm_node_{index}}}"


class SlurmError(SpecError):
    """Slurm refused a request (exit 2, with Slurm's own words)."""


def sbatch_script(plan: Plan, spec: JobSpec) -> str:
    """The batch script: resources in ``#SBATCH`` lines, then the one srun step."""
    itype = lookup(spec.instance_type)
    assert itype is not None, "the spec check rejects unknown instance types"
    procs, nodes = plan.procs_per_host, len(plan.hosts)
    cpus_per_task = max(1, itype.cpus // procs)
    logs = Path(plan.job_dir) / "logs"
    directives = [
        f"--job-name={plan.job_id}",
        f"--nodes={nodes}",
        f"--ntasks-per-node={procs}",
        f"--cpus-per-task={cpus_per_task}",
    ]
    step = [
        "srun",
        f"--nodes={nodes}",
        f"--ntasks={nodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={cpus_per_task * procs}",
    ]
    if itype.gpus > 0:
        directives.append(f"--gpus-per-node={itype.gpus}")
        step.append(f"--gpus-per-node={itype.gpus}")
    if spec.max_run:
        directives.append(f"--time={math.ceil(spec.max_run / 60)}")
    directives += [f"--output={logs / 'slurm-%j.out'}", f"--chdir={plan.cwd}"]
    # One failed agent ends the step; its peers would otherwise wait for a rendezvous.
    step += ["--kill-on-bad-exit=1", python_executable(), "-m", "tenter.launch.slurm", "node"]
    step.append(str(Path(plan.job_dir) / "plan.json"))
    return "\n".join(
        [
            "#!/bin/bash",
            f"# tenter job {plan.job_id}: the whole plan is plan.json next to this script.",
            *(f"#SBATCH {shlex.quote(d)}" for d in directives),
            "set -euo pipefail",
            f"# One tenter agent per node starts its {procs} workers (torch elastic); the agents",
            "# rendezvous (c10d) on the first node of $SLURM_JOB_NODELIST.",
            "exec " + shlex.join(step),
            "",
        ]
    )


class SlurmBackend:
    name = "slurm"

    def dryrun(self, spec: JobSpec, job_id: str) -> Plan:
        itype = lookup(spec.instance_type)
        assert itype is not None, "the spec check rejects unknown instance types"
        plan = make_plan(
            spec,
            job_id,
            tenter_home(),
            python_executable(),
            addrs=[node_placeholder(i) for i in range(spec.instance_count)],
            network_interface=LOOPBACK_NIC if itype.is_local else CLUSTER_NIC,
        )
        assert processes_per_host(spec, itype) == plan.procs_per_host
        script = Path(plan.job_dir) / SCRIPT
        return dataclasses.replace(
            plan,
            launcher=["sbatch", "--parsable", str(script)],
            files={SCRIPT: sbatch_script(plan, spec)},
        )

    def start(self, plan: Plan) -> str:
        """Create the job directory and submit the script; returns Slurm's job id."""
        if shutil.which("sbatch") is None:
            raise SlurmError(
                [
                    Problem(
                        "backend",
                        "slurm: sbatch not found on PATH. Fix: run tenter on a Slurm login node, "
                        "or install the Slurm client (Debian: apt-get install slurm-client) "
                        "configured for your cluster (SLURM_CONF)",
                    )
                ]
            )
        layout.create(plan)
        for name, text in plan.files.items():
            (Path(plan.job_dir) / name).write_text(text)
        done = subprocess.run(plan.launcher, capture_output=True, text=True, cwd=plan.cwd)
        if done.returncode != 0:
            shutil.rmtree(plan.job_dir)  # nothing was submitted: leave nothing behind
            raise SlurmError(
                [
                    Problem(
                        "backend",
                        f"slurm: sbatch rejected the job:\n{done.stderr.strip()}\n"
                        "Hint: `tenter plan --backend slurm` prints the script's #SBATCH lines; "
                        "compare them with the partition's limits (`sinfo -o '%P %D %c %m %G "
                        "%l'`): a GPU count (instance_type), node count (instance_count) or "
                        "time limit (max_run) it cannot give",
                    )
                ]
            )
        slurm_id = done.stdout.strip().split(";")[0]
        (Path(plan.job_dir) / SLURM_ID_FILE).write_text(slurm_id + "\n")
        return slurm_id

    def submit(self, plan: Plan) -> JobResult:
        started = time.monotonic()
        slurm_id = self.start(plan)
        from tenter.launch.console import ConsoleTail, say

        say(f"submitted as Slurm job {slurm_id}")
        tail = ConsoleTail(plan).start()
        try:
            # Ctrl-C or SIGTERM cancels the Slurm job, as it stops a local one.
            with stop_requests() as interrupted:
                state = _follow(slurm_id, interrupted)
        finally:
            tail.stop()
        return _finish(plan, state, time.monotonic() - started)

    def status(self, plan: Plan) -> JobStatus:
        slurm_id = _slurm_id(plan)
        state = slurm_state(slurm_id)
        return JobStatus(state.name in ACTIVE, f"{state.name} (Slurm job {slurm_id}{state.detail})")

    def cancel(self, plan: Plan) -> str:
        slurm_id = _slurm_id(plan)
        done = subprocess.run(["scancel", slurm_id], capture_output=True, text=True)
        if done.returncode != 0:
            raise SlurmError([Problem("JOB", f"scancel {slurm_id} failed: {done.stderr.strip()}")])
        return f"cancelled Slurm job {slurm_id}"


def create_backend() -> SlurmBackend:
    return SlurmBackend()


def _slurm_id(plan: Plan) -> str:
    path = Path(plan.job_dir) / SLURM_ID_FILE
    if not path.exists():
        raise SlurmError([Problem("JOB", f"{plan.job_id} was never submitted to Slurm")])
    return path.read_text().strip()


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
    queued = subprocess.run(
        ["squeue", "-h", "-j", slurm_id, "-o", "%T %r"], capture_output=True, text=True
    )
    if queued.returncode == 0 and queued.stdout.strip():
        name, _, reason = queued.stdout.strip().partition(" ")
        return SlurmState(name, detail=f": {reason}" if reason not in ("", "None") else "")
    shown = subprocess.run(
        ["scontrol", "show", "job", "-o", slurm_id], capture_output=True, text=True
    )
    if shown.returncode == 0 and "JobState=" in shown.stdout:
        fields = _fields(shown.stdout)
        code, _, sig = fields.get("ExitCode", "0:0").partition(":")
        return SlurmState(fields["JobState"], 128 + int(sig) if sig not in ("", "0") else int(code))
    acct = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-j", slurm_id, "-o", "State,ExitCode"],
        capture_output=True,
        text=True,
    )
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


def _follow(slurm_id: str, interrupted: threading.Event) -> SlurmState:
    """Poll until the job ends; Ctrl-C cancels it (and still waits for its end)."""
    cancelled = False
    while True:
        state = slurm_state(slurm_id)
        if state.name not in ACTIVE:
            return state
        if interrupted.is_set() and not cancelled:
            subprocess.run(["scancel", slurm_id], capture_output=True)
            cancelled = True
        time.sleep(POLL_S)


def _finish(plan: Plan, state: SlurmState, duration: float) -> JobResult:
    """The job's result from its files (the agents' reports and error files) and Slurm's
    final state; writes summary.json and each host's output/success|failure."""
    failures, agent_errors = report.collect_failures(plan, None)
    port_file = Path(plan.job_dir) / PORT_FILE
    code: int | None
    if state.name == "COMPLETED":
        code = 0
    elif state.name in EXIT_BY_STATE:
        code = EXIT_BY_STATE[state.name]
    else:  # a rank's failure explains it (None: the root cause's status), or else Slurm's
        code = None if failures else state.exit_code or 1
    return report.record_result(
        plan,
        failures,
        [f"Slurm job state: {state.name}{state.detail}", *agent_errors],
        exit_code=code,
        duration_s=duration,
        interrupted=state.name == "CANCELLED",
        rdzv_endpoint=port_file.read_text().strip() if port_file.exists() else "",
    )


# ---- on the nodes: `python -m tenter.launch.slurm node PLAN` (one per node, from srun) ----


def _node_names(nodelist: str) -> list[str]:
    out = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True
    )
    return out.stdout.split()


def _wait_for_port(path: Path, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the first node did not publish its rendezvous port in {path}")
        time.sleep(0.1)
    return int(path.read_text().rsplit(":", 1)[1])


def node_main(plan_path: str) -> int:
    nodes = _node_names(os.environ["SLURM_JOB_NODELIST"])
    node_id = int(os.environ["SLURM_NODEID"])
    text = Path(plan_path).read_text()
    for index, node in enumerate(nodes):
        text = text.replace(node_placeholder(index), node)
    plan = Plan.from_json(text)
    plan = dataclasses.replace(plan, rdzv_endpoint=f"{nodes[0]}:{RDZV_PORT}")
    host = plan.hosts[node_id]
    with open(Path(plan.job_dir) / "logs" / f"agent-{host.name}.log", "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    resolved = Path(host.dir) / "plan.json"
    resolved.write_text(plan.to_json())
    os.environ.update(host.env)
    port_file = Path(plan.job_dir) / PORT_FILE
    store = None
    if node_id == 0:
        # The kernel picks the port and the store keeps the socket: no window for a clash.
        listener = socket.create_server(("", 0), backlog=1024)
        port = listener.getsockname()[1]
        store = serve_store(nodes[0], listener)
        tmp = port_file.with_suffix(".tmp")
        tmp.write_text(f"{nodes[0]}:{port}\n")
        tmp.replace(port_file)
    else:
        port = _wait_for_port(port_file, plan.join_timeout)
    from tenter.launch import agent

    code = agent.main([str(resolved), str(node_id), str(port)])
    if store is not None:
        # Serve the store until every agent is done with it.
        results = [Path(h.dir) / report.AGENT_RESULT for h in plan.hosts]
        deadline = time.monotonic() + 60
        while not all(r.exists() for r in results) and time.monotonic() < deadline:
            time.sleep(0.1)
    return code


if __name__ == "__main__":
    if sys.argv[1:2] != ["node"] or len(sys.argv) != 3:
        sys.exit("usage: python -m tenter.launch.slurm node PLAN_JSON")
    code = node_main(sys.argv[2])
    sys.stdout.flush()
    os._exit(code)
