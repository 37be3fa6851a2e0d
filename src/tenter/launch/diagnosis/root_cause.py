"""What happened: per-rank failures gathered from the agents, the root cause, the summary.

The root cause is the earliest *primary* failure. A failure is secondary when it is a
consequence of another: a peer's broken connection (gloo/NCCL errors that follow a rank's
death) or tenter's own stop of the remaining workers. Without that distinction the first
rank to notice a dead peer would be blamed for its death.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from tenter.contract.plan import HostPlan, Plan
from tenter.contract.torchrun import finished_marker
from tenter.goodput.keeper import LedgerKeeper
from tenter.goodput.ledger import Ledger, summary_line
from tenter.jobdir import layout
from tenter.jobdir.agent_result import HostState, WorkerFailure
from tenter.jobdir.agent_result import read_result as read_agent_result
from tenter.jobdir.events import replica_checks
from tenter.jobdir.results import Failure, JobResult, JobState, write_result
from tenter.launch.shared.console import PEER_ERROR, RANK_PREFIX, read_index
from tenter.spec.errors import counted

log = logging.getLogger(__name__)
HOST_RANK = -1
"""The rank of a failure that is a whole host's (its agent died), not one rank's."""
STDERR_TAIL_LINES = 20


_SIGNAL_MEANING = {
    signal.SIGSEGV: "segmentation fault in native code",
    signal.SIGABRT: "aborted: a C++ exception or assertion in native code",
    signal.SIGBUS: "bus error: often a /dev/shm too small for shared memory",
    signal.SIGTERM: "terminated",
    signal.SIGINT: "interrupted",
}


def _sigkill_meaning(oom_kills: int | None) -> str:
    """Who sends SIGKILL: the OOM killer only when the kernel counted one."""
    if oom_kills is None:
        return "killed: by a user, a scheduler or the out-of-memory killer (see `dmesg`)"
    if oom_kills:
        return f"killed by the kernel's out-of-memory killer ({oom_kills} OOM kills in the job)"
    return (
        "killed by a user, a scheduler or a watchdog; not by the out-of-memory killer "
        "(the kernel counted no OOM kill during the job)"
    )


def exit_meaning(exit_code: int | None, oom_kills: int | None = None) -> str:
    """``exit code 1``, ``signal 9 (SIGKILL, exit code 137): killed ...``.

    Only a negative status is a signal (the agent saw the process end by it); a process that
    exits with 137 itself was not killed, whatever shells make of the number. ``oom_kills``:
    the kernel's count of OOM kills during the job, None where unknown."""
    if exit_code is None:
        return "did not finish"
    if exit_code >= 0:
        shell_signal = exit_code - 128 if exit_code > 128 else 0
        if shell_signal in {int(s) for s in signal.Signals}:
            return (
                f"exit code {exit_code} (the process exited with it: not killed by "
                f"{signal.Signals(shell_signal).name}, though shells show that as {exit_code})"
            )
        return f"exit code {exit_code}"
    try:
        sig = signal.Signals(-exit_code)
    except ValueError:
        return f"signal {-exit_code}"
    meaning = _sigkill_meaning(oom_kills) if sig == signal.SIGKILL else _SIGNAL_MEANING.get(sig, "")
    return f"signal {int(sig)} ({sig.name}, exit code {128 + int(sig)})" + (
        f": {meaning}" if meaning else ""
    )


def oom_kill_count() -> int | None:
    """How many processes the kernel's OOM killer has killed in this process's memory cgroup
    (which the local workers share), or None where it does not say (cgroup v2
    ``memory.events``, v1 ``memory.oom_control``; the mounted hierarchy may be the
    container's own root rather than the path /proc names)."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    candidates = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            candidates += [f"/sys/fs/cgroup{path}/memory.events", "/sys/fs/cgroup/memory.events"]
        elif "memory" in controllers.split(","):
            base = "/sys/fs/cgroup/memory"
            candidates += [f"{base}{path}/memory.oom_control", f"{base}/memory.oom_control"]
    for candidate in candidates:
        try:
            text = Path(candidate).read_text()
        except OSError:
            continue
        match = re.search(r"^oom_kill (\d+)$", text, re.MULTILINE)
        if match:
            return int(match.group(1))
    return None


def oom_kills_since(before: int | None) -> int | None:
    """The OOM killer's kills since it had made ``before`` (:func:`oom_kill_count`), or None
    where it does not say."""
    after = oom_kill_count()
    return None if after is None or before is None else after - before


def host_lost(
    host: HostPlan, agent_pid: int | None, exit_code: int, log: str, cause: str = ""
) -> Failure:
    """A host whose agent was killed (or whose node was lost: ``cause``): its workers went
    with it (their parent-death signal), so no rank of it reports; the host is the failure.
    Rank -1 marks a host's failure."""
    cause = cause or f"its agent was killed by {signal.Signals(-exit_code).name}"
    return Failure(
        host=host.name,
        rank=HOST_RANK,
        local_rank=HOST_RANK,
        pid=agent_pid,
        exit_code=exit_code,
        timestamp=time.time(),
        message=f"host {host.name} lost: {cause}",
        log=log,
    )


def host_unreachable(host: HostPlan, since: float, log: str) -> Failure:
    """A host cut off by a network partition, which a static job cannot go on without: the
    one root cause, rather than its peers' timeouts and broken connections that follow."""
    at = time.strftime("%H:%M:%S", time.localtime(since))
    return Failure(
        host=host.name,
        rank=HOST_RANK,
        local_rank=HOST_RANK,
        pid=None,
        exit_code=None,
        timestamp=since,
        message=f"host {host.name} became unreachable at {at} (network partition)",
        log=log,
    )


# Frames of the machinery between the launcher and the user's code.
_LAUNCH_FRAMES = ("<frozen runpy>", "tenter/runtime/bootstrap.py", "elastic/multiprocessing/errors")


def user_traceback(text: str) -> str:
    """The traceback as the user's script would print it: without torch's ``[rankN]:``
    prefixes and without the frames of tenter's bootstrap and runpy."""
    out: list[str] = []
    skipping = False
    for line in RANK_PREFIX.sub("", text).splitlines():
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
    return bool(PEER_ERROR.search(message + traceback))


def _tail(path: str, lines: int = STDERR_TAIL_LINES) -> str:
    try:
        return "".join(Path(path).read_text(errors="replace").splitlines(True)[-lines:])
    except OSError:
        return ""


def _exit_code_of(message: str) -> int:
    """What the bootstrap exited with for a recorded failure: sys.exit's status, else 1."""
    match = re.fullmatch(r"SystemExit: (\d+)", message.strip())
    return int(match.group(1)) if match else 1


def collect_failures(
    plan: Plan, stopped_at: float | None
) -> tuple[list[Failure], list[str], list[str]]:
    """Every rank's failure in each host's last attempt, agent-level errors, and the ranks that
    finished their script and then crashed at exit (which are not failures).

    A rank failed if its error file exists (it recorded an exception or a non-zero exit;
    the file's mtime is when) or if its agent saw it exit badly (a signal, or a failure the
    bootstrap could not record). Agents that tenter itself stopped report nothing, so the
    error files are read for every rank. Failures of earlier attempts were recovered by a
    restart and are not the job's.
    """
    reported: dict[str, WorkerFailure] = {}
    agent_errors: list[str] = []
    for host in plan.hosts:
        result = read_agent_result(host.dir)
        if result is not None:
            if result.state == HostState.ERROR:
                agent_errors.append(f"{host.name}: {result.message}")
            reported.update({f.error_file: f for f in result.failures})
    entries = read_index(plan.job_dir)
    last_attempt: dict[object, object] = {}
    for entry in entries:
        last_attempt[entry["host"]] = entry["attempt"]
    failures: list[Failure] = []
    finished_then_crashed: list[str] = []
    for entry in entries:
        if entry["attempt"] != last_attempt[entry["host"]]:
            continue
        stem = str(entry["stem"])
        error_file = layout.error_file(stem)
        seen = reported.get(error_file)
        recorded = Path(error_file).exists()
        if seen is None and not recorded:
            continue
        if not recorded and Path(finished_marker(error_file)).exists():
            # The script returned; the process died after, in native teardown (gloo's threads,
            # a crash handler at shutdown): the rank's work is done, the job did not fail.
            assert seen is not None
            finished_then_crashed.append(
                f"rank {entry['rank']} on {entry['host']} finished its script, then ended with "
                f"{exit_meaning(seen.exit_code)} during interpreter exit (not counted)"
            )
            continue
        message, traceback = _read_error_file(error_file) if recorded else ("", "")
        if recorded:
            timestamp = os.stat(error_file).st_mtime
        else:
            assert seen is not None
            timestamp = seen.timestamp
        # A rank that recorded a Python exception exited with the bootstrap's status; a
        # SIGABRT in its teardown after that (gloo's threads with a peer still mid-collective)
        # is incidental, not the failure.
        exit_code = seen.exit_code if seen and not traceback else _exit_code_of(message)
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
                pid=seen.pid if seen else None,
                exit_code=exit_code,
                timestamp=timestamp,
                message=message,
                traceback=traceback,
                stderr_tail="" if traceback else _tail(layout.stderr_file(stem)),
                log=layout.stderr_file(stem),
                secondary=killed_by_us or bool(PEER_ERROR.search(message + traceback)),
            )
        )
    return failures, agent_errors, finished_then_crashed


def _who(f: Failure) -> str:
    return f"host {f.host}" if f.rank == HOST_RANK else f"rank {f.rank} on {f.host}"


def failure_reason(result: JobResult) -> str:
    """One line: what failed first, for ``output/failure`` and exceptions."""
    f = result.root_cause
    if result.state == JobState.PREEMPTED:
        return "preempted"
    if f is None:
        return "interrupted" if result.interrupted else "the job failed"
    what = f.message.splitlines()[0] if f.message else exit_meaning(f.exit_code)
    return f"{_who(f)} failed: {what}"


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What the launcher knows beyond the ranks' failures."""

    exit_code: int
    """The job's, in :class:`tenter.errors.ExitCode`'s table (the root cause's own status is
    in its failure record)."""
    duration_s: float
    interrupted: bool
    rdzv_endpoint: str
    extra: list[str] = dataclasses.field(default_factory=list)
    """Lines for a failed job's summary, before the root cause."""
    lost_hosts: dict[str, str] = dataclasses.field(default_factory=dict)
    """Hosts an elastic job went on without, and why."""
    oom_kills: int | None = None
    """The kernel's OOM kills during the job; None where it does not say."""
    notes: list[str] = dataclasses.field(default_factory=list)
    """Lines for every summary, succeeded or not (ranks that crashed after finishing)."""
    stragglers: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """Stragglers named while the job ran (summary.json), each with its line (``text``)."""


def _root_cause_lines(root: Failure, oom_kills: int | None) -> list[str]:
    if root.rank == HOST_RANK and root.exit_code is None:  # alive, but cut off
        return [f"root cause: {root.message}", f"  log: {root.log}"]
    pid = f"pid {root.pid}" if root.pid else ""
    if root.rank == HOST_RANK:
        where = f"host {root.host} lost (its agent{', ' + pid if pid else ''})"
    else:
        where = f"rank {root.rank} on host {root.host} (local rank {root.local_rank}"
        where += f", {pid})" if pid else ")"
    lines = [f"root cause: {where}: {exit_meaning(root.exit_code, oom_kills)}"]
    body = root.traceback or root.message or root.stderr_tail
    if body:
        lines += ["  " + line for line in body.rstrip().splitlines()]
    lines.append(f"  log: {root.log}")
    return lines


def _time_lines(result: JobResult, indent: str) -> list[str]:
    """Where the time went: the goodput line, the stragglers named."""
    lines = [summary_line(Ledger.from_dict(result.goodput))] if result.goodput else []
    lines += [f"straggler: {s['text']}" for s in result.stragglers]
    lines += [d["text"] for d in result.replicas.get("diverged", [])]
    return [indent + line for line in lines]


def render_summary(result: JobResult, plan: Plan, outcome: Outcome) -> str:
    """The end-of-job report: the root cause first, with its traceback."""
    head = f"job {result.job_id} "
    size = (
        f"{counted(result.hosts, 'host')} x {counted(result.procs_per_host, 'process')} = "
        f"{counted(result.hosts * result.procs_per_host, 'rank')}"
    )
    if outcome.lost_hosts:
        size += f"; lost: {', '.join(outcome.lost_hosts)}"
    job_dir = Path(result.job_dir)
    if result.ok:
        survivor = next(h for h in plan.hosts if h.name not in outcome.lost_hosts)
        return "\n".join(
            [
                head + f"succeeded in {result.duration_s:.1f} s ({size})",
                *_time_lines(result, "  "),
                *[f"  host {name} lost: {why}" for name, why in outcome.lost_hosts.items()],
                *[f"  note: {note}" for note in outcome.notes],
                f"  model:   {Path(survivor.dir) / 'model'}",
                f"  outputs: {job_dir / 'hosts'}/*/output/data",
                f"  logs:    {job_dir / 'logs'}",
            ]
        )
    state = (
        f"was {result.state}"
        if result.state in (JobState.INTERRUPTED, JobState.PREEMPTED)
        else "FAILED"
    )
    lines = [
        head + f"{state} after {result.duration_s:.1f} s ({size})",
        *_time_lines(result, ""),
        *outcome.extra,
        *[f"note: {note}" for note in outcome.notes],
    ]
    root = result.root_cause
    if root is not None:
        lines += _root_cause_lines(root, outcome.oom_kills)
        others = [f for f in result.failures if f is not root]
        if others:
            lines.append("also stopped (after the root cause):")
            for f in sorted(others, key=lambda f: f.rank):
                first = (
                    f.message.splitlines()[0]
                    if f.message
                    else exit_meaning(f.exit_code, outcome.oom_kills)
                )
                lines.append(f"  {_who(f)}: {first[:160]}")
    lines.append(f"job directory: {job_dir}")
    return "\n".join(lines)


def _final_ledger(plan: Plan, state: str) -> dict[str, Any]:
    """The job's goodput ledger as it ended (``state``), also kept in ``goodput.json``; empty
    when its records cannot be read (the summary goes on without it)."""
    try:
        return LedgerKeeper(plan.job_dir).write(final_state=state).to_dict()
    except (OSError, ValueError, KeyError, TypeError) as e:
        log.warning("no goodput ledger for %s: %s", plan.job_id, e)
        return {}


def record_result(plan: Plan, failures: list[Failure], outcome: Outcome) -> JobResult:
    """The job's result, written where ``tenter status`` and SageMaker-style tooling read it
    (``summary.json``, each host's ``output/success|failure``), so that every backend that
    runs tenter's agents leaves the same job directory.

    A full or failing disk does not lose the result: what could not be written is said in the
    summary, which the caller prints.
    """
    result = JobResult(
        job_id=plan.job_id,
        job_dir=plan.job_dir,
        exit_code=outcome.exit_code,
        duration_s=outcome.duration_s,
        hosts=len(plan.hosts) - len(outcome.lost_hosts),
        procs_per_host=plan.procs_per_host,
        failures=failures,
        interrupted=outcome.interrupted,
        rdzv_endpoint=outcome.rdzv_endpoint,
        stragglers=outcome.stragglers,
        replicas=replica_checks(plan.job_dir),
    )
    result = dataclasses.replace(result, goodput=_final_ledger(plan, result.state))
    summary = render_summary(result, plan, outcome)
    why = None if result.ok else failure_reason(result)
    # What the spares of an agent that was killed left (its pool removes its own at its end).
    shutil.rmtree(Path(plan.job_dir) / layout.SPARES_DIR, ignore_errors=True)
    try:
        for host in plan.hosts:
            lost = outcome.lost_hosts.get(host.name)
            layout.write_outcome(host.dir, f"host {host.name} lost: {lost}" if lost else why)
        result = dataclasses.replace(result, summary=summary)
        write_result(Path(plan.job_dir), result)
    except OSError as e:
        summary += (
            f"\ntenter could not write the job's result to {plan.job_dir}: {e.strerror} "
            "(free space there; this summary is all that is left of it)"
        )
        result = dataclasses.replace(result, summary=summary)
    return result
