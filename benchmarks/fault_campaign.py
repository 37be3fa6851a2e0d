"""A fault campaign: one real training job, run once uninterrupted and once per fault, each
run's end checked against the uninterrupted one.

    python benchmarks/fault_campaign.py [--faults worker_kill,...] [--epochs 3] [--keep DIR]

The job: examples/elastic/train.py (DDP, deterministic) on 2 hosts x 2 processes under
benchmarks/workloads/faulty.py, which logs each rank's steps and the sample indices of each
step, and injects the fault at step :data:`FAULT_STEP` of the first attempt
(benchmarks/recovery.py's machinery: its :class:`Fault`, :class:`Cell`, job runner and
measures). Checkpoints every
``CHECKPOINT_EVERY`` steps, a number of steps per epoch (16) divides, so that the last
checkpoint is the final state. For each fault (:data:`FAULTS`):

- ``exit``: the job's exit status (of its last run, for a fault that runs it again);
- ``recover_s`` and ``lost_steps``: from the fault to rank 0's first step after it, and the
  steps done again (benchmarks/recovery_counting.py);
- ``identical``: the final checkpoint's model and optimizer state, hashed, equal to the
  uninterrupted run's; else ``reason`` names why (a world that shrank splits each batch
  over other ranks) and the largest difference;
- ``straggler`` (the table only): the ranks tenter named as stragglers (``slow_rank``: each
  step of rank 2 0.3 s longer from the fault on);
- ``duplicates``, ``gaps``: tenter's sample ledger (:mod:`tenter.data.ledger`): over each
  epoch, the samples trained on twice, and those never trained on, counting each step's last
  execution.

One line per run, then a table::

    campaign fault=worker_kill job=ddp exit=0 recover_s=1.03 lost_steps=3 identical=yes \
        duplicates=0 gaps=0

(one line each).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

sys.path.insert(0, str(Path(__file__).parent))  # recovery.py's own imports, when loaded
import recovery

from tenter.checkpoint import atomic
from tenter.checkpoint.model_state import SHARDED_DIR
from tenter.checkpoint.run_state import STATE_FILE
from tenter.data import ledger

CHECKPOINT_EVERY = 8
FAULT_STEP = 11
"""Three steps after the checkpoint of step 8: in the first epoch, so that a one-epoch run
(the CI test's) meets it too."""
DATASET_SIZE = 1024
"""examples/elastic/train.py's dataset; a global batch of 64: 16 steps an epoch."""


@dataclass(frozen=True)
class CampaignFault:
    fault: recovery.Fault
    why_not_identical: str | None = None
    """Where the run cannot end bit-identical: why (no spaces); None: it must."""
    step: int = FAULT_STEP
    """The step it hits."""
    elastic: str = ""
    """The job's further elastic keys (``, key: value``...)."""
    max_restarts: int = 1
    tmpfs: bool = False
    """The checkpoint directory a tmpfs of :data:`TMPFS_SIZE` (needs root)."""


TMPFS_SIZE = "1m"
"""Some 11 checkpoints of the example's (88 KiB each)."""


FAULTS: dict[str, CampaignFault] = {
    "worker_kill": CampaignFault(recovery.Fault("kill_worker", 3, min_hosts=2, exact=True)),
    "worker_exception": CampaignFault(recovery.Fault("raise_error", 1, min_hosts=2, exact=True)),
    "preempt_sigterm": CampaignFault(
        recovery.Fault("preempt", 0, min_hosts=2, exact=True, resume=True)
    ),
    "cancel_preempt": CampaignFault(
        recovery.Fault("cancel_preempt", 0, min_hosts=2, exact=True, resume=True)
    ),
    "launcher_kill": CampaignFault(
        recovery.Fault("kill_launcher", 0, min_hosts=2, exact=True, resume=True)
    ),
    "slow_rank": CampaignFault(recovery.Fault("slow_down", 2, min_hosts=2, exact=True)),
    # A rank stops (SIGSTOP): no rank makes progress; after hang_timeout, a restart.
    "frozen_rank": CampaignFault(
        recovery.Fault("freeze", 3, min_hosts=2, exact=True),
        elastic=", hang_timeout: 2, on_hang: restart",
    ),
    # Rank 3 dies at step 11; as the job restarts, rank 1 dies before its rendezvous.
    "second_fault_in_recovery": CampaignFault(
        recovery.Fault("kill_twice", 3, min_hosts=2, exact=True), max_restarts=2
    ),
    # The kernel's OOM killer, a memory cgroup's limit passed (needs cgroup v1 memory, root).
    "worker_oom_killed": CampaignFault(recovery.Fault("out_of_memory", 1, min_hosts=2, exact=True)),
    # Rank 0 fills the checkpoint directory's file system; the checkpoint of step 16 fails.
    "checkpoint_disk_full": CampaignFault(
        recovery.Fault("fill_disk", 0, min_hosts=2, exact=True), "disk_full_job_stopped", tmpfs=True
    ),
    # Rank 0 dies inside the checkpoint of step 16 (renamed, not in the manifest): from 8.
    "checkpoint_write_kill": CampaignFault(
        recovery.Fault("kill_in_checkpoint", 0, min_hosts=2, exact=True)
    ),
    # After the checkpoints of steps 8 and 16: the newest damaged, the job resumes from 8.
    "checkpoint_flipped_byte": CampaignFault(
        recovery.Fault("flip_checkpoint_byte", 0, min_hosts=2, exact=True), step=19
    ),
    "checkpoint_truncated": CampaignFault(
        recovery.Fault("truncate_checkpoint", 0, min_hosts=2, exact=True), step=19
    ),
    # Rank 0 cuts algo-2 off the network (isolation: network): the job goes on without it.
    "partition_shrink": CampaignFault(
        recovery.Fault("partition", 0, min_hosts=1, exact=False, isolated=True),
        "world_shrank_from_4_to_2_ranks",
    ),
    "host_lost_shrink": CampaignFault(
        recovery.Fault("kill_host", 2, min_hosts=1, exact=False),
        "world_shrank_from_4_to_2_ranks",
    ),
}
"""The faults, the cheap first."""

JOBS = ("ddp", "fsdp2")
"""The job's two forms: examples/elastic/train.py with DDP, and with ``--fsdp`` (FSDP2,
sharded over the 4 ranks; its checkpoints through DCP)."""
FSDP2_FAULTS = (
    "worker_kill",
    "worker_exception",
    "preempt_sigterm",
    "slow_rank",
    "checkpoint_flipped_byte",
)
"""The faults the FSDP2 job runs too (``--jobs ddp,fsdp2``)."""


@dataclass(frozen=True)
class Row:
    fault: str
    job: str
    exit: int
    recover_s: float | None
    lost_steps: int | None
    identical: bool
    reason: str
    duplicates: int
    gaps: int
    stragglers: str = ""
    """The stragglers tenter named (``rank N on HOST``, comma-separated)."""

    def line(self) -> str:
        recover = f"{self.recover_s:.2f}" if self.recover_s is not None else "n/a"
        lost = self.lost_steps if self.lost_steps is not None else "n/a"
        text = (
            f"campaign fault={self.fault} job={self.job} exit={self.exit} recover_s={recover} "
            f"lost_steps={lost} identical={'yes' if self.identical else 'no'} "
            f"duplicates={self.duplicates} gaps={self.gaps}"
        )
        return text if self.identical else f"{text} reason={self.reason}"


def duplicates_and_gaps(times: Path) -> tuple[int, int]:
    """The job's sample ledger (:func:`tenter.data.ledger.sample_ledger` over faulty.py's
    log in ``times``), summed over its epochs: samples trained on twice, never trained on."""
    epochs = ledger.sample_ledger(ledger.read_sample_log(times), DATASET_SIZE).values()
    duplicates = sum(n - 1 for epoch in epochs for n in epoch.duplicates.values())
    return duplicates, sum(len(epoch.gaps) for epoch in epochs)


def _tensors(value: Any, prefix: str = "") -> Iterator[tuple[str, torch.Tensor]]:
    if isinstance(value, torch.Tensor):
        yield prefix, value
    elif isinstance(value, Mapping):
        for key in sorted(value, key=str):
            yield from _tensors(value[key], f"{prefix}/{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from _tensors(item, f"{prefix}/{i}")


def final_state(checkpoints: Path) -> dict[str, torch.Tensor]:
    """The model and optimizer state of the newest checkpoint in ``checkpoints``, by name
    (a sharded one's DCP files gathered into one state first)."""
    latest = atomic.read_manifest(checkpoints).latest
    if latest is None:
        return {}
    folder = checkpoints / latest.name
    if (folder / SHARDED_DIR).is_dir():
        whole = folder.parent / f"{folder.name}.whole.pt"
        dcp_to_torch_save(folder / SHARDED_DIR, whole)
        state = torch.load(whole, weights_only=False)
        whole.unlink()
    else:
        state = torch.load(folder / STATE_FILE, weights_only=False)
    return dict(_tensors({"model": state["model"], "optimizer": state["optimizer"]}))


def state_hash(state: Mapping[str, torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for name, tensor in state.items():
        digest.update(name.encode())
        digest.update(tensor.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def largest_difference(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor]) -> float:
    if a.keys() != b.keys():
        return float("inf")
    return max(
        (float((a[k].double() - b[k].double()).abs().max()) for k in a if a[k].numel()),
        default=0.0,
    )


def run_job(name: str, chosen: CampaignFault, work: Path, epochs: int, job: str) -> recovery.Ran:
    """The ``job`` (one of :data:`JOBS`) with ``chosen`` fault (none where its rank is -1),
    in ``work``."""
    env = recovery._cell_env(work / "times", chosen.fault) | {"FAULT_STEP": str(chosen.step)}
    cell = recovery.Cell(name, chosen.fault, work, env)
    script = [recovery.TRAIN, "--epochs", str(epochs), "--checkpoint_every", str(CHECKPOINT_EVERY)]
    script += ["--fsdp"] if job == "fsdp2" else []
    if chosen.tmpfs:
        (work / "ckpt").mkdir()
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", work / "ckpt"], check=True
        )
    try:
        elastic = recovery._elastic(cell, chosen.elastic, chosen.max_restarts)
        return recovery._tenter_job(cell, script, elastic)
    finally:
        if chosen.tmpfs:
            shutil.copytree(
                work / "ckpt", work / "ckpt-kept", ignore=shutil.ignore_patterns("filler")
            )
            subprocess.run(["umount", work / "ckpt"], check=True)
            (work / "ckpt").rmdir()
            (work / "ckpt-kept").rename(work / "ckpt")
        cgroup = work / "times" / "cgroup"  # the OOM fault's, its worker gone with the job
        if cgroup.exists():
            Path(cgroup.read_text()).rmdir()


def campaign_row(
    name: str, work: Path, epochs: int, job: str, reference: Mapping[str, torch.Tensor]
) -> Row:
    """Run ``job`` with fault ``name`` and compare its end with ``reference``."""
    chosen = FAULTS[name]
    ran = run_job(name, chosen, work, epochs, job)
    cell = recovery.Cell(name, chosen.fault, work, {"TIMES_DIR": str(work / "times")})
    measured = recovery.measure(cell, dataclasses.replace(ran, code=0), None)
    state = final_state(work / "ckpt")
    identical = bool(state) and state_hash(state) == state_hash(reference)
    reason = ""
    if not identical:
        why = chosen.why_not_identical or "unexpected"
        reason = f"{why}:max_abs_diff={largest_difference(state, reference):.3g}"
    duplicates, gaps = duplicates_and_gaps(work / "times")
    return Row(
        name,
        job,
        ran.code,
        measured.recover_s if measured else None,
        measured.lost_steps if measured else None,
        identical,
        reason,
        duplicates,
        gaps,
        named_stragglers(work / "home"),
    )


def named_stragglers(home: Path) -> str:
    """The stragglers the job's runs named (their summary.json)."""
    named = [
        f"rank {s['rank']} on {s['host']}"
        for summary in sorted(home.glob("jobs/*/summary.json"))
        for s in json.loads(summary.read_text()).get("stragglers", [])
    ]
    return ",".join(named)


def uninterrupted(work: Path, epochs: int, job: str) -> tuple[Row, dict[str, torch.Tensor]]:
    none = CampaignFault(recovery.Fault("kill_worker", -1, 2, exact=True))
    ran = run_job("none", none, work, epochs, job)
    duplicates, gaps = duplicates_and_gaps(work / "times")
    row = Row("none", job, ran.code, None, None, True, "", duplicates, gaps)
    return row, final_state(work / "ckpt")


def table(rows: list[Row]) -> str:
    head = f"{'fault':23s} {'job':5s} {'exit':>4s} {'recover_s':>9s} {'lost':>4s} "
    lines = [head + f"{'identical':>9s} {'dup':>4s} {'gaps':>4s}  straggler  reason"]
    for r in rows:
        recover = f"{r.recover_s:.2f}" if r.recover_s is not None else "n/a"
        lost = str(r.lost_steps) if r.lost_steps is not None else "n/a"
        lines.append(
            f"{r.fault:23s} {r.job:5s} {r.exit:>4d} {recover:>9s} {lost:>4s} "
            f"{'yes' if r.identical else 'no':>9s} {r.duplicates:>4d} {r.gaps:>4d}  "
            f"{r.stragglers or '-':9s}  {r.reason}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument(
        "--jobs", default="ddp", help=f"ddp, fsdp2 or both (fsdp2 runs {', '.join(FSDP2_FAULTS)})"
    )
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--keep", metavar="DIR", help="run in DIR and keep the runs' files")
    args = parser.parse_args()
    names = args.faults.split(",")
    unknown = set(names) - set(FAULTS)
    if unknown:
        parser.error(f"unknown faults {sorted(unknown)}; known: {', '.join(FAULTS)}")
    jobs = args.jobs.split(",")
    if set(jobs) - set(JOBS):
        parser.error(f"--jobs {args.jobs}: each one of {', '.join(JOBS)}")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as scratch:
        for job in jobs:
            rows += campaign(Path(args.keep or scratch) / job, job, names, args.epochs)
    print(table(rows))


def campaign(root: Path, job: str, names: list[str], epochs: int) -> list[Row]:
    """``job`` uninterrupted, then with each of the faults ``names`` (the FSDP2 job: those
    of them in :data:`FSDP2_FAULTS`), in ``root``; each row printed as it ends."""
    first, reference = uninterrupted(root / "none", epochs, job)
    print(first.line(), flush=True)
    rows = [first]
    for name in names:
        if job == "ddp" or name in FSDP2_FAULTS:
            rows.append(campaign_row(name, root / name, epochs, job, reference))
            print(rows[-1].line(), flush=True)
    return rows


if __name__ == "__main__":
    main()
