"""A fault campaign: real training jobs, each run once uninterrupted and once per fault, each
run's end checked against the uninterrupted one.

    python benchmarks/fault_campaign.py [--faults worker_kill,...] [--jobs ddp,fsdp2,torchft,...]
                                        [--epochs 3] [--keep DIR]

The jobs (:data:`JOBS`): examples/elastic/train.py (DDP, deterministic; ``fsdp2``: the same
with ``--fsdp``) on 2 hosts x 2 processes, and examples/torchft/train.py (2 replica groups of
1 process, 400 steps; ``torchft_min2``: with ``min_replicas: 2``), under
benchmarks/workloads/faulty.py, which logs each rank's steps and the sample indices of each
step, and injects the fault at step :data:`FAULT_STEP` of the first
attempt (benchmarks/recovery.py's machinery: its :class:`Fault`, :class:`Cell`, job runner and
measures). Each fault runs in the jobs its ``jobs`` name. Checkpoints every
``CHECKPOINT_EVERY`` steps, a number of steps per epoch (16) divides, so that the last
checkpoint is the final state. For each fault (:data:`FAULTS`):

- ``exit``: the job's exit status (of its last run, for a fault that runs it again);
- ``recover_s`` and ``lost_steps``: from the fault to rank 0's first step after it, and the
  steps done again (benchmarks/recovery_counting.py);
- ``identical``: the final checkpoint's model and optimizer state (torchft: each replica
  group's final model), hashed, equal to the uninterrupted run's; else ``reason`` names why
  (a world that shrank or grew splits each batch over other ranks, with other dropout masks)
  and the largest difference;
- ``straggler`` (the table only): the ranks tenter named as stragglers (``slow_rank``: each
  step of rank 2 0.3 s longer from the fault on);
- ``duplicates``, ``gaps``: tenter's sample ledger (:mod:`tenter.data.ledger`): over each
  epoch, the samples trained on twice, and those never trained on, counting each step's last
  execution (torchft's jobs: the log of :class:`tenter.runtime.ft.SampleDealer`, each
  committed step once; their last epoch, which the step count cuts, counts as gaps only the
  samples before the position it reached).

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
import time
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
from tenter.runtime import ft

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
    jobs: tuple[str, ...] = ("ddp",)
    """The jobs (:data:`JOBS`) it runs in."""
    hosts: int = 2
    """The hosts the job starts with."""
    identical_in: tuple[str, ...] = ()
    """The jobs where it must end bit-identical all the same."""


TMPFS_SIZE = "1m"
"""Some 11 checkpoints of the example's (88 KiB each)."""


FAULTS: dict[str, CampaignFault] = {
    "worker_kill": CampaignFault(
        recovery.Fault("kill_worker", 3, min_hosts=2, exact=True), jobs=("ddp", "fsdp2")
    ),
    "worker_exception": CampaignFault(
        recovery.Fault("raise_error", 1, min_hosts=2, exact=True), jobs=("ddp", "fsdp2")
    ),
    "preempt_sigterm": CampaignFault(
        recovery.Fault("preempt", 0, min_hosts=2, exact=True, resume=True), jobs=("ddp", "fsdp2")
    ),
    "cancel_preempt": CampaignFault(
        recovery.Fault("cancel_preempt", 0, min_hosts=2, exact=True, resume=True)
    ),
    "launcher_kill": CampaignFault(
        recovery.Fault("kill_launcher", 0, min_hosts=2, exact=True, resume=True)
    ),
    "slow_rank": CampaignFault(
        recovery.Fault("slow_down", 2, min_hosts=2, exact=True), jobs=("ddp", "fsdp2")
    ),
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
    # Rank 0 fills the checkpoint directory's file system; the checkpoint of step 16 is
    # skipped on every rank and training goes on; then space comes back (the filler removed).
    "checkpoint_disk_full": CampaignFault(
        recovery.Fault("fill_disk", 0, min_hosts=2, exact=True), tmpfs=True, jobs=("ddp", "fsdp2")
    ),
    # Rank 0 dies inside the checkpoint of step 16 (renamed, not in the manifest): from 8.
    "checkpoint_write_kill": CampaignFault(
        recovery.Fault("kill_in_checkpoint", 0, min_hosts=2, exact=True)
    ),
    # After the checkpoints of steps 8 and 16: the newest damaged, the job resumes from 8.
    "checkpoint_flipped_byte": CampaignFault(
        recovery.Fault("flip_checkpoint_byte", 0, min_hosts=2, exact=True),
        step=19,
        jobs=("ddp", "fsdp2"),
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
    # A job of 1 host x 2 processes; rank 0 runs `tenter join`: it grows to 2 hosts.
    "host_joins_grow": CampaignFault(
        recovery.Fault("join_host", 0, min_hosts=1, exact=False),
        "world_grew_from_2_to_4_ranks",
        elastic=", max_hosts: 2",
        hosts=1,
    ),
    # Ranks 0, 2 and 3 finish the job while rank 1 exits 3: every host restarts, and the
    # restart resumes from the last step's checkpoint with nothing left to do.
    "rank_fails_as_others_finish": CampaignFault(
        recovery.Fault("fail_at_end", 1, min_hosts=2, exact=True), jobs=("ddp", "fsdp2")
    ),
    # torchft: replica group 1's process SIGKILLed; the group restarts and heals from group
    # 0, which trains on alone meanwhile (min_replicas 1; with 2, it waits for group 1).
    "replica_group_killed": CampaignFault(
        recovery.Fault("kill_worker", 1, min_hosts=2, exact=True),
        "group_0_trained_alone_while_group_1_restarted",
        jobs=("torchft", "torchft_min2"),
        identical_in=("torchft_min2",),
    ),
}
"""The faults, the cheap first."""

JOBS = ("ddp", "fsdp2", "torchft", "torchft_min2")
"""The jobs: examples/elastic/train.py with DDP, and with ``--fsdp`` (FSDP2, sharded over the
4 ranks; its checkpoints through DCP); examples/torchft/train.py in 2 replica groups of one
process (no checkpoints: its end is each group's final model), with ``min_replicas`` 1 (a
group trains alone while the other is down) and 2 (``torchft_min2``: no step commits without
both, so every step's global batch is the uninterrupted run's)."""
TORCHFT_JOBS = {"torchft": 1, "torchft_min2": 2}
"""The torchft jobs' ``min_replicas``."""
TORCHFT_SEED = 0
"""examples/torchft/train.py's, which orders its epochs (``ft.epoch_order``)."""


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

    def shown(self) -> dict[str, str]:
        """The measures as printed: ``n/a`` where not measured."""
        recover = f"{self.recover_s:.2f}" if self.recover_s is not None else "n/a"
        measures = {"lost": self.lost_steps, "dup": self.duplicates, "gaps": self.gaps}
        return {"recover": recover} | {
            key: "n/a" if value is None else str(value) for key, value in measures.items()
        }

    def line(self) -> str:
        shown = self.shown()
        text = (
            f"campaign fault={self.fault} job={self.job} exit={self.exit} "
            f"recover_s={shown['recover']} lost_steps={shown['lost']} "
            f"identical={'yes' if self.identical else 'no'} "
            f"duplicates={shown['dup']} gaps={shown['gaps']}"
        )
        return text if self.identical else f"{text} reason={self.reason}"


def duplicates_and_gaps(times: Path) -> tuple[int, int]:
    """The job's sample ledger (:func:`tenter.data.ledger.sample_ledger` over faulty.py's
    log in ``times``), summed over its epochs: samples trained on twice, never trained on."""
    epochs = ledger.sample_ledger(ledger.read_sample_log(times), DATASET_SIZE).values()
    duplicates = sum(n - 1 for epoch in epochs for n in epoch.duplicates.values())
    return duplicates, sum(len(epoch.gaps) for epoch in epochs)


def sample_figures(job: str, work: Path) -> tuple[int, int]:
    """``duplicates_and_gaps`` of the job in ``work``; a torchft job's from its job
    directory's log (the dealer's), less its last epoch's rest, which the step count cut
    before it (the epoch's order after the position the job reached)."""
    if job not in TORCHFT_JOBS:
        return duplicates_and_gaps(work / "times")
    (job_dir,) = (work / "home" / "jobs").iterdir()
    duplicates, gaps = duplicates_and_gaps(job_dir)
    epochs = ledger.sample_ledger(ledger.read_sample_log(job_dir), DATASET_SIZE)
    last = epochs[max(epochs)]
    unreached = set(ft.epoch_order(DATASET_SIZE, TORCHFT_SEED, last.epoch)[last.seen :])
    return duplicates, gaps - len(unreached & set(last.gaps))


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
    if job in TORCHFT_JOBS:
        return recovery.torchft_job(cell, TORCHFT_JOBS[job])
    if chosen.tmpfs:
        (work / "ckpt").mkdir()
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", work / "ckpt"], check=True
        )
    try:
        elastic = recovery._elastic(cell, chosen.elastic, chosen.max_restarts)
        return recovery._tenter_job(cell, script, elastic, hosts=chosen.hosts)
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
    recover_s, lost = recovery_measures(name, chosen, work, ran, ended=time.time())
    ends = end_states(job, work)
    identical = bool(ends[0]) and all(state_hash(s) == state_hash(reference) for s in ends)
    reason = ""
    if not identical:
        expected = chosen.why_not_identical if job not in chosen.identical_in else None
        why = expected or "unexpected"
        if any(state_hash(s) != state_hash(ends[0]) for s in ends):
            why = "replica_groups_differ"  # a group that did not heal to its peer's state
        reason = f"{why}:max_abs_diff={largest_difference(ends[0], reference):.3g}"
    duplicates, gaps = sample_figures(job, work)
    return Row(
        name,
        job,
        ran.code,
        recover_s,
        lost,
        identical,
        reason,
        duplicates,
        gaps,
        named_stragglers(work / "home"),
    )


def recovery_measures(
    name: str, chosen: CampaignFault, work: Path, ran: recovery.Ran, ended: float
) -> tuple[float | None, int | None]:
    """``recover_s`` and ``lost_steps``: to rank 0's first step after the fault; where no
    step came after it (a fault as the job ends) and the job succeeded, to the job's end
    (``ended``), none lost."""
    cell = recovery.Cell(name, chosen.fault, work, {"TIMES_DIR": str(work / "times")})
    measured = recovery.measure(cell, dataclasses.replace(ran, code=0), None)
    if measured is not None:
        return measured.recover_s, measured.lost_steps
    fault = work / "times" / "fault"
    if ran.code == 0 and fault.exists():
        return ended - float(fault.read_text()), 0
    return None, None


def end_states(job: str, work: Path) -> list[dict[str, torch.Tensor]]:
    """The job's end: the newest checkpoint's state; torchft's job (no checkpoints): each
    replica group's final model (its host's ``model.pt``)."""
    if job not in TORCHFT_JOBS:
        return [final_state(work / "ckpt")]
    (last,) = sorted((work / "home" / "jobs").iterdir())[-1:]
    models = sorted(last.glob("hosts/algo-*/model/model.pt"))
    return [dict(_tensors({"model": torch.load(model)})) for model in models] or [{}]


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
    duplicates, gaps = sample_figures(job, work)
    row = Row("none", job, ran.code, None, None, True, "", duplicates, gaps)
    return row, end_states(job, work)[0]


def table(rows: list[Row]) -> str:
    head = f"{'fault':27s} {'job':12s} {'exit':>4s} {'recover_s':>9s} {'lost':>4s} "
    lines = [head + f"{'identical':>9s} {'dup':>4s} {'gaps':>4s}  straggler  reason"]
    for r in rows:
        shown = r.shown()
        lines.append(
            f"{r.fault:27s} {r.job:12s} {r.exit:>4d} {shown['recover']:>9s} {shown['lost']:>4s} "
            f"{'yes' if r.identical else 'no':>9s} {shown['dup']:>4s} {shown['gaps']:>4s}  "
            f"{r.stragglers or '-':9s}  {r.reason}"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", default=",".join(FAULTS))
    parser.add_argument(
        "--jobs", default=",".join(JOBS), help=f"of {', '.join(JOBS)} (each its faults')"
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
    """``job`` uninterrupted, then with each of the faults ``names`` that it runs (their
    ``jobs``), in ``root``; each row printed as it ends. Nothing where it runs none."""
    names = [name for name in names if job in FAULTS[name].jobs]
    if not names:
        return []
    first, reference = uninterrupted(root / "none", epochs, job)
    print(first.line(), flush=True)
    rows = [first]
    for name in names:
        rows.append(campaign_row(name, root / name, epochs, job, reference))
        print(rows[-1].line(), flush=True)
    return rows


if __name__ == "__main__":
    main()
