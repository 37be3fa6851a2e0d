"""The job directory on disk; this module owns every name in it::

<job_dir>/plan.json                  the request that ran (the plan; Kubernetes: the manifests),
                                     written once, at launch
<job_dir>/membership.jsonl           the launch, and each host that joined since (.membership)
<job_dir>/handle.json                which backend holds the job and its id there
<job_dir>/summary.json               outcome, duration, failures (written when the job ends)
<job_dir>/goodput.json               the goodput ledger (:mod:`tenter.goodput.keeper`)
<job_dir>/progress.json              the ranks' steps as the ledger last read them (tenter status)
<job_dir>/events.jsonl               rendezvous rounds and restarts, as the agents saw them
<job_dir>/metrics.jsonl              the live view's samples (:mod:`tenter.monitor.live`)
<job_dir>/metrics/rank-<N>.jsonl     what rank N reported; metrics/steps/: the steps tenter counted;
                                     metrics/samples/: the samples each rank logged
<job_dir>/network.json               an isolated job's namespaces and links
<job_dir>/hang-report.txt            the stacks of a hung job's ranks
<job_dir>/rdzv-port, lighthouse-port a Slurm job's ports, published by its first node
<job_dir>/control/                   requests to the running ranks (:mod:`tenter.jobdir.control`)
<job_dir>/report/                    ``tenter report``'s plots and report.md
<job_dir>/checkpoints/               the job's checkpoints (unless the spec names a dir)
<job_dir>/logs/rank-<N>.stdout|.stderr|.error.json   (restarts: rank-<N>.<host>.attempt-<K>.*)
<job_dir>/logs/rank-<N>.watch|.stacks|.finished      progress, stacks on demand, "returned"
<job_dir>/logs/index.jsonl           which log files exist, for which rank, host and attempt
<job_dir>/logs/agent-<host>[.<K>].log   each host agent's own log (K: its K-th replacement)
<job_dir>/logs/launcher.log, mpirun.log, lighthouse.log, store.log, replica-<G>.step
<job_dir>/hosts/<algo-N>/            one SageMaker /opt/ml tree per host:
    agent-result.json                what the host's agent reported (:mod:`.agent_result`)
    plan.json                        a Slurm node's plan, its run-time values filled in
    input/config/{resourceconfig,hyperparameters,inputdataconfig}.json
    input/data/<channel> -> your data (a link, not a copy)
    model/  output/data/  output/success|failure
    checkpoints -> the job's checkpoint directory (shared by all hosts)
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol

from tenter.jobdir import private

PLAN_FILE = "plan.json"
SPEC_FILE = "spec.json"
"""The spec the job was planned from, for ``tenter run JOB_DIR`` (running it again)."""
MEMBERSHIP_FILE = "membership.jsonl"
HANDLE_FILE = "handle.json"
SUMMARY_FILE = "summary.json"
GOODPUT_FILE = "goodput.json"
PROGRESS_FILE = "progress.json"
EVENTS_FILE = "events.jsonl"
METRICS_FILE = "metrics.jsonl"
METRICS_TOKEN_FILE = "metrics.token"
"""The token of a metrics endpoint bound beyond loopback (0600; :mod:`tenter.jobdir.private`)."""
RANK_DIR = "metrics"
STEPS_DIR = "steps"
"""Under RANK_DIR: the DDP steps tenter counted on each rank (``rank-<N>.jsonl``)."""
SAMPLES_DIR = "samples"
"""Under RANK_DIR: the sample indices each rank trained on, step by step (``rank-<N>.jsonl``,
:mod:`tenter.data.ledger`)."""
NETWORK_FILE = "network.json"
HANG_REPORT_FILE = "hang-report.txt"
RDZV_PORT_FILE = "rdzv-port"
LIGHTHOUSE_PORT_FILE = "lighthouse-port"
CONTROL_DIR = "control"
REPORT_DIR = "report"
CHECKPOINTS_DIR = "checkpoints"
HOSTS_DIR = "hosts"
LOGS_DIR = "logs"
INDEX_FILE = "index.jsonl"
LAUNCHER_LOG = "launcher.log"
MPIRUN_LOG = "mpirun.log"
LIGHTHOUSE_LOG = "lighthouse.log"
STORE_LOG = "store.log"
REPLICA_STEP_FILE = "replica-{group}.step"
"""Under LOGS_DIR: the last step replica group ``group`` committed, written by its rank 0
(:mod:`tenter.runtime.ft`), read by the launcher when the group is lost."""
SPARES_DIR = "spares"
"""Under it, per host: the temporary directory of the host's warm spares
(:mod:`tenter.launch.agent.spares`), removed when the host's agent ends."""
ETC_DIR = "etc"
"""An isolated job's hosts' own ``/etc`` files."""
AGENT_RESULT_FILE = "agent-result.json"
ERROR_FILE_SUFFIX = ".error.json"
"""A rank's error file: its log stem and this (torch's error-file convention)."""
FINISHED_SUFFIX = ".finished"
"""A rank's log stem and this: its script returned (see ``contract.torchrun.finished_marker``)."""
STDOUT_SUFFIX, STDERR_SUFFIX = ".stdout", ".stderr"
"""A rank's log stem and these: its output."""
WATCH_SUFFIX = ".watch"
"""A rank's log stem and this: its progress record (``TENTER_WATCH_FILE``, the hang watch)."""
STACKS_SUFFIX = ".stacks"
RANK_PREFIX = "rank-"
"""How every file of one rank's is named: this, its rank, then a dot (:func:`rank_of`)."""
"""A rank's log stem and this: its stacks, dumped when the launcher asks (SIGUSR1)."""
HOST_SUBDIRS = (
    "input/config",
    "input/data",
    "model",
    "output/data",
    "output/intermediate",
)


class HostTree(Protocol):
    """What a host's ``/opt/ml`` tree is made of (the plan's HostPlan has these fields)."""

    @property
    def dir(self) -> str: ...
    @property
    def files(self) -> Mapping[str, str]: ...
    @property
    def links(self) -> Mapping[str, str]: ...


def logs_dir(job_dir: str | os.PathLike[str]) -> Path:
    return Path(job_dir) / LOGS_DIR


def rank_log_stem(
    logs: str | os.PathLike[str], rank: int, host: str | None = None, attempt: int = 0
) -> str:
    """A rank's log files, less their suffix: ``logs/rank-N``, or with ``host``, for a
    restart or a rank moved to another host, ``logs/rank-N.<host>.attempt-<K>``."""
    name = (
        f"{RANK_PREFIX}{rank}" if host is None else f"{RANK_PREFIX}{rank}.{host}.attempt-{attempt}"
    )
    return f"{os.fspath(logs)}/{name}"  # not pathlib's join: a plan names 8,192 at 1,024 hosts


def worker_log_stem(job_dir: str, rank: int, host: str, attempt: int, *, planned: bool) -> str:
    """Where a worker's logs go: ``logs/rank-N`` for the first attempt of a rank the plan
    gives ``host`` (``planned``), and a name with host and attempt for any other (a restart
    must not overwrite the output of earlier attempts; after a membership change a rank
    number may move to another host)."""
    logs = logs_dir(job_dir)
    if attempt or not planned:
        return rank_log_stem(logs, rank, host, attempt)
    return rank_log_stem(logs, rank)


def error_file(stem: str | os.PathLike[str]) -> str:
    """The error file of the rank whose logs are ``stem``.*."""
    return f"{stem}{ERROR_FILE_SUFFIX}"


def stdout_file(stem: str | os.PathLike[str]) -> str:
    return f"{stem}{STDOUT_SUFFIX}"


def stderr_file(stem: str | os.PathLike[str]) -> str:
    return f"{stem}{STDERR_SUFFIX}"


def watch_file(stem: str | os.PathLike[str]) -> str:
    return f"{stem}{WATCH_SUFFIX}"


def stacks_file(stem: str | os.PathLike[str]) -> str:
    return f"{stem}{STACKS_SUFFIX}"


def rank_stem(rank_file: str, suffix: str) -> str:
    """The log stem of a rank's file named ``<stem><suffix>``."""
    return rank_file.removesuffix(suffix)


def rank_of(path: str | os.PathLike[str]) -> int | None:
    """The rank whose file ``path`` is (``rank-<N>.<anything>``), or None for another file."""
    name = os.path.basename(path)
    if not name.startswith(RANK_PREFIX):
        return None
    rank = name.removeprefix(RANK_PREFIX).split(".", 1)[0]
    return int(rank) if rank.isdigit() else None


def worker_rank(environ: Mapping[str, str]) -> int:
    """The job-wide rank that names a worker's files, from its environment: torch's ``RANK``
    (mpirun's ``OMPI_COMM_WORLD_RANK``), which in a replica group counts within the group,
    after the ranks of the groups before it (:meth:`tenter.contract.plan.Plan.job_rank`), so
    that groups never share a file."""
    rank = int(environ.get("RANK") or environ.get("OMPI_COMM_WORLD_RANK") or 0)
    group = int(environ.get("REPLICA_GROUP_ID") or 0)
    return group * int(environ.get("WORLD_SIZE") or 1) + rank


def rank_file(job_dir: str | os.PathLike[str], rank: int) -> Path:
    """What rank ``rank`` reported (:mod:`tenter.monitor.reporter`)."""
    return Path(job_dir) / RANK_DIR / f"{RANK_PREFIX}{rank}.jsonl"


def rank_steps_file(job_dir: str | os.PathLike[str], rank: int) -> Path:
    """The steps tenter counted on rank ``rank`` (:mod:`tenter.runtime.steps`)."""
    return Path(job_dir) / RANK_DIR / STEPS_DIR / f"{RANK_PREFIX}{rank}.jsonl"


def rank_samples_file(job_dir: str | os.PathLike[str], rank: int) -> Path:
    """The sample indices rank ``rank`` logged (:class:`tenter.data.ledger.SampleLog`)."""
    return Path(job_dir) / RANK_DIR / SAMPLES_DIR / f"{RANK_PREFIX}{rank}.jsonl"


def host_model_dir(job_dir: str | os.PathLike[str], host: str) -> Path:
    return Path(job_dir) / HOSTS_DIR / host / "model"


def spares_tmp_dir(job_dir: str | os.PathLike[str], host: str) -> Path:
    return Path(job_dir) / SPARES_DIR / host


def agent_log(host: str, replacement: int = 0) -> str:
    """The name of a host agent's log under LOGS_DIR (``replacement``: the agent started
    in place of a lost one, 1, 2...)."""
    return f"agent-{host}.{replacement}.log" if replacement else f"agent-{host}.log"


def agent_logs(job_dir: str | os.PathLike[str], host: str) -> list[Path]:
    """The logs of ``host``'s agents so far: the first's and its replacements'."""
    logs = logs_dir(job_dir)
    return [p for p in [logs / agent_log(host), *logs.glob(f"agent-{host}.*.log")] if p.exists()]


def create(
    job_dir: Path, hosts: Iterable[HostTree], shared_dirs: Iterable[str] = (), group: str = ""
) -> None:
    """Create the job directory, private (:mod:`tenter.jobdir.private`: its user's, or
    ``group``'s too) before anything is written in it. Fails if it exists: a job id is never
    reused."""
    if not job_dir.parent.exists():
        private.make_dirs(job_dir.parent, group)
    job_dir.mkdir(mode=private.PRIVATE_MODE)
    private.make_private(job_dir, group)
    (job_dir / LOGS_DIR).mkdir()
    for path in shared_dirs:
        private.make_dirs(Path(path), group)
    for host in hosts:
        create_host(host)


def create_host(host: HostTree) -> None:
    root = Path(host.dir)
    for sub in HOST_SUBDIRS:
        (root / sub).mkdir(parents=True, exist_ok=True)
    for rel, content in host.files.items():
        (root / rel).write_text(content)
    for rel, target in host.links.items():
        os.symlink(target, root / rel)


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` in one step: a reader sees the old file or the new one, never half."""
    write_atomic_bytes(path, text.encode())


def write_atomic_bytes(path: Path, data: bytes) -> None:
    """:func:`write_atomic` of bytes."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        tmp.write_bytes(data)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)  # a full disk leaves no half-written file behind
        raise


def write_outcome(host_dir: str, failure: str | None) -> None:
    """SageMaker's ``output/success`` or ``output/failure`` (holding the reason)."""
    out = Path(host_dir) / "output"
    if failure is None:
        (out / "success").write_text("")
    else:
        (out / "failure").write_text(failure + "\n")
