"""What happened: per-rank failures gathered from the agents, the root cause, the summary.

The root cause is the earliest *primary* failure. A failure is secondary when it is a
consequence of another: a peer's broken connection (gloo/NCCL errors that follow a rank's
death) or tenter's own stop of the remaining workers. Without that distinction the first
rank to notice a dead peer would be blamed for its death.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
from pathlib import Path
from typing import Any

from tenter.contract.plan import Plan
from tenter.jobdir import layout
from tenter.jobdir.results import Failure, JobResult, write_result
from tenter.launch.console import read_index

AGENT_RESULT = "agent-result.json"
STDERR_TAIL_LINES = 20

_PEER_ERROR = re.compile(
    r"Connection closed by peer|Connection reset by peer|Broken pipe|DistBackendError"
    r"|NCCL communicator was aborted|Socket Timeout|failed to recv|Timed out waiting"
)

_SIGNAL_MEANING = {
    signal.SIGKILL: "killed: most often by the out-of-memory killer (see `dmesg`), "
    "or by a user or scheduler",
    signal.SIGSEGV: "segmentation fault in native code",
    signal.SIGABRT: "aborted: a C++ exception or assertion in native code",
    signal.SIGBUS: "bus error: often a /dev/shm too small for shared memory",
    signal.SIGTERM: "terminated",
    signal.SIGINT: "interrupted",
}


def exit_meaning(exit_code: int | None) -> str:
    """``exit code 1``, ``signal 9 (SIGKILL, exit code 137): killed: ...``."""
    if exit_code is None:
        return "did not finish"
    signum = -exit_code if exit_code < 0 else exit_code - 128 if exit_code > 128 else 0
    if signum <= 0:
        return f"exit code {exit_code}"
    try:
        sig = signal.Signals(signum)
    except ValueError:
        return f"exit code {exit_code}"
    meaning = _SIGNAL_MEANING.get(sig, "")
    return f"signal {signum} ({sig.name}, exit code {128 + signum})" + (
        f": {meaning}" if meaning else ""
    )


_RANK_PREFIX = re.compile(r"^\[rank\d+\]: ", re.MULTILINE)
# Frames of the machinery between the launcher and the user's code.
_LAUNCH_FRAMES = ("<frozen runpy>", "tenter/runtime/bootstrap.py", "elastic/multiprocessing/errors")


def user_traceback(text: str) -> str:
    """The traceback as the user's script would print it: without torch's ``[rankN]:``
    prefixes and without the frames of tenter's bootstrap and runpy."""
    out: list[str] = []
    skipping = False
    for line in _RANK_PREFIX.sub("", text).splitlines():
        if line.startswith("  File "):
            skipping = any(frame in line for frame in _LAUNCH_FRAMES)
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            out.append(line)
    return "\n".join(out)


def _read_error_file(path: str) -> tuple[str, str]:
    """(message, traceback) from torch elastic's error file format."""
    try:
        data: Any = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return "", ""
    message = data.get("message", "")
    if isinstance(message, dict):
        return str(message.get("message", "")), user_traceback(
            str(message.get("extraInfo", {}).get("py_callstack", ""))
        )
    return str(message), ""


def is_peer_error(error_file: str) -> bool:
    """The recorded failure is a consequence of a peer's (a broken connection)."""
    message, traceback = _read_error_file(error_file)
    return bool(_PEER_ERROR.search(message + traceback))


def _tail(path: str, lines: int = STDERR_TAIL_LINES) -> str:
    try:
        return "".join(Path(path).read_text(errors="replace").splitlines(True)[-lines:])
    except OSError:
        return ""


def _exit_code_of(message: str) -> int:
    """What the bootstrap exited with for a recorded failure: sys.exit's status, else 1."""
    match = re.fullmatch(r"SystemExit: (\d+)", message.strip())
    return int(match.group(1)) if match else 1


def collect_failures(plan: Plan, stopped_at: float | None) -> tuple[list[Failure], list[str]]:
    """Every rank's failure in each host's last attempt, and agent-level errors.

    A rank failed if its error file exists (it recorded an exception or a non-zero exit;
    the file's mtime is when) or if its agent saw it exit badly (a signal, or a failure the
    bootstrap could not record). Agents that tenter itself stopped report nothing, so the
    error files are read for every rank. Failures of earlier attempts were recovered by a
    restart and are not the job's.
    """
    reported: dict[str, dict[str, Any]] = {}
    agent_errors: list[str] = []
    for host in plan.hosts:
        path = Path(host.dir) / AGENT_RESULT
        if path.exists():
            result = json.loads(path.read_text())
            if result["state"] == "ERROR":
                agent_errors.append(f"{host.name}: {result['message']}")
            reported.update({f["error_file"]: f for f in result["failures"]})
    entries = read_index(plan.job_dir)
    last_attempt: dict[object, object] = {}
    for entry in entries:
        last_attempt[entry["host"]] = entry["attempt"]
    failures: list[Failure] = []
    for entry in entries:
        if entry["attempt"] != last_attempt[entry["host"]]:
            continue
        stem = str(entry["stem"])
        error_file = f"{stem}.error.json"
        seen = reported.get(error_file)
        recorded = Path(error_file).exists()
        if seen is None and not recorded:
            continue
        message, traceback = _read_error_file(error_file) if recorded else ("", "")
        if recorded:
            timestamp = os.stat(error_file).st_mtime
        else:
            assert seen is not None
            timestamp = seen["timestamp"]
        # A rank that recorded a Python exception exited with the bootstrap's status; a
        # SIGABRT in its teardown after that (gloo's threads with a peer still mid-collective)
        # is incidental, not the failure.
        exit_code = seen["exit_code"] if seen and not traceback else _exit_code_of(message)
        killed_by_us = (
            stopped_at is not None
            and exit_code in (-signal.SIGTERM, -signal.SIGKILL)
            and timestamp >= stopped_at
        )
        failures.append(
            Failure(
                host=str(entry["host"]),
                rank=int(str(entry["rank"])),
                local_rank=int(str(entry["local_rank"])),
                pid=seen["pid"] if seen else None,
                exit_code=exit_code,
                timestamp=timestamp,
                message=message,
                traceback=traceback,
                stderr_tail="" if traceback else _tail(f"{stem}.stderr"),
                log=f"{stem}.stderr",
                secondary=killed_by_us or bool(_PEER_ERROR.search(message + traceback)),
            )
        )
    return failures, agent_errors


def failure_reason(result: JobResult) -> str:
    """One line: what failed first, for ``output/failure`` and exceptions."""
    f = result.root_cause
    if f is None:
        return "interrupted" if result.interrupted else "the job failed"
    what = f.message.splitlines()[0] if f.message else exit_meaning(f.exit_code)
    return f"rank {f.rank} on {f.host} failed: {what}"


def render_summary(result: JobResult, plan: Plan, extra: list[str]) -> str:
    """The end-of-job report: the root cause first, with its traceback."""
    head = f"job {result.job_id} "
    size = f"{result.hosts} hosts x {result.procs_per_host} processes = {plan.world_size} ranks"
    job_dir = Path(result.job_dir)
    if result.ok:
        model = Path(plan.hosts[0].dir) / "model"
        return "\n".join(
            [
                head + f"succeeded in {result.duration_s:.1f} s ({size})",
                f"  model:   {model}",
                f"  outputs: {job_dir / 'hosts'}/*/output/data",
                f"  logs:    {job_dir / 'logs'}",
            ]
        )
    state = "was interrupted" if result.interrupted else "FAILED"
    lines = [head + f"{state} after {result.duration_s:.1f} s ({size})", *extra]
    root = result.root_cause
    if root is not None:
        pid = f", pid {root.pid}" if root.pid else ""
        lines.append(
            f"root cause: rank {root.rank} on host {root.host} (local rank {root.local_rank}"
            f"{pid}): {exit_meaning(root.exit_code)}"
        )
        body = root.traceback or root.message or root.stderr_tail
        if body:
            lines += ["  " + line for line in body.rstrip().splitlines()]
        lines.append(f"  log: {root.log}")
        others = [f for f in result.failures if f is not root]
        if others:
            lines.append("also stopped (after the root cause):")
            for f in sorted(others, key=lambda f: f.rank):
                first = f.message.splitlines()[0] if f.message else exit_meaning(f.exit_code)
                lines.append(f"  rank {f.rank} on {f.host}: {first[:160]}")
    lines.append(f"job directory: {job_dir}")
    return "\n".join(lines)


def record_result(
    plan: Plan,
    failures: list[Failure],
    extra: list[str],
    *,
    exit_code: int,
    duration_s: float,
    interrupted: bool,
    rdzv_endpoint: str,
) -> JobResult:
    """The job's result, written where ``tenter status`` and SageMaker-style tooling read it
    (``summary.json``, each host's ``output/success|failure``), so that every backend that
    runs tenter's agents leaves the same job directory.

    ``exit_code`` is the job's, in :class:`tenter.errors.ExitCode`'s table (the root cause's
    own status is in its failure record). ``extra`` lines go into a failed job's summary before
    the root cause.
    """
    result = JobResult(
        job_id=plan.job_id,
        job_dir=plan.job_dir,
        exit_code=exit_code,
        duration_s=duration_s,
        hosts=len(plan.hosts),
        procs_per_host=plan.procs_per_host,
        failures=failures,
        interrupted=interrupted,
        rdzv_endpoint=rdzv_endpoint,
    )
    summary = render_summary(result, plan, extra)
    why = None if result.ok else failure_reason(result)
    for host in plan.hosts:
        layout.write_outcome(host.dir, why)
    result = dataclasses.replace(result, summary=summary)
    write_result(Path(plan.job_dir), result)
    return result
