"""Recovery from failures: scenarios x strategies on the same training script, in the same run.

    python benchmarks/recovery.py [--reps 3] [--scenarios worker_kill,host_lost,partition,preempt]
                                  [--strategies tenter,tenter_cold,torchrun,torchft]

The job: examples/elastic/train.py (checkpoints every 10 steps, 48 steps) on 2 hosts x 2
processes, under benchmarks/workloads/faulty.py, which logs every step of every rank with its
wall time and, at step 25 of the first attempt, injects the scenario's fault from one rank.

- Scenarios (:data:`SCENARIOS`) say what breaks: ``worker_kill`` (rank 3 SIGKILLs itself;
  the job restarts at full size from the checkpoint of step 20), ``host_lost`` (rank 2 kills
  its host: its agent and workers; the job goes on with one host), ``partition`` (rank 0 cuts
  algo-2 off the network with ``tenter fault``: isolated hosts; the job goes on with one
  host), ``preempt`` (rank 0 sends the launcher, or torchrun's agents, SIGTERM; the job is
  then run again and resumes from its last checkpoint).
- Strategies (:data:`STRATEGIES`) run the job and recover: ``tenter`` (``tenter run`` with
  ``elastic.max_restarts``: a classic restart of the worker groups, within the rendezvous
  round when the job's membership is fixed, as in ``worker_kill``; workers forked from
  each host's warm template, torch imported), ``tenter_cold`` (the same with warm workers
  off: every worker a fresh process), ``torchrun``
  (two torchrun agents with a c10d rendezvous, ``--max-restarts``: the same restart from the
  last checkpoint, with torchrun's own process start-up), ``torchft`` (``tenter run`` of
  examples/torchft/train.py, the same model in two replica groups of one host x 1 process
  each (the example's layout) under torchft: a lost group heals from the
  other, which never rolls back). A strategy that
  cannot meet a scenario (torchrun has no isolated hosts; the torchft example has no
  checkpoints to resume a preempted job from) shows ``n/a``.

Measured from the fault's time: ``detect_s``, until the first agent reacted (its log: a
worker's failure seen, a new node seen, a rendezvous round joined) or tenter's launcher
declared a host unreachable (a partition; ``events.jsonl``); ``recover_s``, until
rank 0 completed its first step after the recovery; ``lost_steps``, steps done before the
fault and done again after it; and whether the final model is bit for bit an uninterrupted
run's where it should be (a restart at full size; after a host is lost the world is smaller,
and the model differs by design). One line per cell::

    recovery scenario=<s> strategy=<t> detect_s=<x> recover_s=<y> lost_steps=<n>

then a table of medians, the ratios to torchrun, and per scenario a PNG timeline (rank 0's
step against the time since the fault, the fault marked) in benchmarks/results/.
Strategies alternate within each repetition so that load from elsewhere hits all of them.

Adding a scenario or a strategy is one function each: a scenario returns its :class:`Fault`
(a fault the workload does is one entry in faulty.py's FAULTS); a strategy runs the job for a
:class:`Cell` and returns the agent logs and the final model it left.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import _torchrun
import torch
from recovery_counting import first_recovered, lost_steps

REPO = Path(__file__).resolve().parents[1]
FAULTY = str(REPO / "benchmarks/workloads/faulty.py")
TRAIN = str(REPO / "examples/elastic/train.py")
TRAIN_FT = str(REPO / "examples/torchft/train.py")
STEPS_FT = 400
"""The torchft run's steps (its step is a few milliseconds)."""
RESULTS = REPO / "benchmarks/results"
FAULT_STEP = 25
RUN_TIMEOUT_S = 180.0
"""A run that takes longer has hung and counts as failed."""
LAST_CALL_S = 1
"""Rendezvous last call (both launchers): how long a shrunk job waits for more hosts."""


@dataclass(frozen=True)
class Fault:
    """What a scenario breaks, and what the job must allow to survive it."""

    action: str
    """What rank ``rank`` does at step FAULT_STEP: a name in faulty.py's FAULTS."""
    rank: int
    min_hosts: int
    """2: the job restarts at full size; 1: it may go on without a lost host."""
    exact: bool
    """The final model must equal an uninterrupted run's."""
    isolated: bool = False
    """The hosts must be isolated (a network fault)."""
    resume: bool = False
    """The job stops and is run again (a preemption)."""


@dataclass(frozen=True)
class Cell:
    scenario: str
    fault: Fault
    work: Path
    """An empty directory for this run."""
    env: dict[str, str]
    """The environment of the launcher, fault and step log settings included."""


@dataclass(frozen=True)
class Ran:
    code: int
    """0 when the job (what is left of it) succeeded."""
    agent_logs: list[Path]
    model: Path
    comparable: bool = True
    """The model can be compared with the uninterrupted run's (the same training script)."""
    resumed_at: float | None = None
    """When the job was run again (``Fault.resume``)."""
    noticed: tuple[float, ...] = ()
    """When tenter's launcher declared a host unreachable (``events.jsonl``): what a
    partition's detection is, the agents having nothing to react to before."""


SCENARIOS: dict[str, Callable[[], Fault]] = {}
STRATEGIES: dict[str, Callable[[Cell], Ran | None]] = {}
"""A strategy returns None for a scenario it cannot meet."""


def scenario(fn: Callable[[], Fault]) -> Callable[[], Fault]:
    SCENARIOS[fn.__name__] = fn
    return fn


def strategy(fn: Callable[[Cell], Ran | None]) -> Callable[[Cell], Ran | None]:
    STRATEGIES[fn.__name__.removeprefix("run_")] = fn
    return fn


@scenario
def worker_kill() -> Fault:
    # A rank of the second host: under torchft, of the replica group that is not rank 0's.
    return Fault("kill_worker", rank=3, min_hosts=2, exact=True)


@scenario
def host_lost() -> Fault:
    return Fault("kill_host", rank=2, min_hosts=1, exact=False)


@scenario
def partition() -> Fault:
    return Fault("partition", rank=0, min_hosts=1, exact=False, isolated=True)


@scenario
def preempt() -> Fault:
    return Fault("preempt", rank=0, min_hosts=2, exact=True, resume=True)


def _tenter_job(
    cell: Cell,
    script: list[str],
    more: str,
    procs: int = 2,
    warm: bool | None = None,
    hosts: int = 2,
) -> Ran:
    """``tenter run`` of ``script`` on ``hosts`` hosts x ``procs`` processes (``more``: spec
    lines); run again after a preemption. ``warm``: warm workers forced on or off; None:
    tenter's default (on)."""
    home = cell.work / "home"
    spec = cell.work / "job.yaml"
    spec.write_text(
        f"entry_point: {FAULTY}\nargs: {script}\ninstance_count: {hosts}\n"
        f"processes_per_host: {procs}\n"
        f"checkpoint: {{dir: {cell.work / 'ckpt'}}}\n"
        f"isolation: {'network' if cell.fault.isolated else 'none'}\n{more}"
    )
    argv = [sys.executable, "-m", "tenter", "run", str(spec)]
    env = {k: v for k, v in cell.env.items() if k != "TENTER_WARM_WORKERS"}
    env["TENTER_HOME"] = str(home)
    if warm is not None:
        env["TENTER_WARM_WORKERS"] = "1" if warm else "0"
    code = _run(argv, env)
    resumed_at = None
    if cell.fault.resume:
        resumed_at = time.time()
        code = _run(argv, env)
    jobs = sorted((home / "jobs").iterdir())
    logs = sorted(p for job in jobs for p in job.glob("logs/agent-*.log"))
    model = jobs[-1] / "hosts/algo-1/model/model.pt" if jobs else home
    noticed = tuple(
        event["time"]
        for job in jobs
        if (job / "events.jsonl").exists()
        for event in map(json.loads, (job / "events.jsonl").read_text().splitlines())
        if event["event"] == "unreachable"
    )
    return Ran(code, logs, model, resumed_at=resumed_at, noticed=noticed)


def _elastic(cell: Cell, more: str = "", max_restarts: int = 1) -> str:
    """The job's elastic spec line; ``more``: its further keys (``, key: value``...)."""
    return (
        f"elastic: {{min_hosts: {cell.fault.min_hosts}, max_restarts: {max_restarts},"
        f" rendezvous: {{last_call_timeout: {LAST_CALL_S}}}{more}}}\n"
    )


@strategy
def run_tenter(cell: Cell) -> Ran | None:
    return _tenter_job(cell, [TRAIN], _elastic(cell))


@strategy
def run_tenter_cold(cell: Cell) -> Ran | None:
    return _tenter_job(cell, [TRAIN], _elastic(cell), warm=False)


@strategy
def run_torchft(cell: Cell) -> Ran | None:
    if cell.fault.resume:
        return None  # the torchft example keeps no checkpoint to resume from
    # The example runs one process per replica group: 2 groups of one host x 1 process. A
    # fault of the second host's is rank 1's (the second group's).
    if cell.fault.rank >= 2:
        cell = dataclasses.replace(cell, env={**cell.env, "FAULT_RANK": "1"})
    return dataclasses.replace(torchft_job(cell), comparable=False)


def torchft_job(cell: Cell, min_replicas: int = 1) -> Ran:
    """examples/torchft/train.py in 2 replica groups of one host x 1 process; rank ``r`` is
    group ``r``'s. ``min_replicas`` 2: no step without both groups."""
    return _tenter_job(
        cell,
        # More steps than the others: with min_replicas 1 a group trains alone until the
        # other has started, and the fault waits for a step both take part in.
        [TRAIN_FT, "--steps", str(STEPS_FT)],
        "elastic: {max_restarts: 1}\nenvironment: {RUST_LOG: warn}\n"
        f"fault_tolerance: {{replica_groups: 2, min_replicas: {min_replicas}}}\n",
        procs=1,
    )


@strategy
def run_torchrun(cell: Cell) -> Ran | None:
    if cell.fault.isolated:
        return None  # torchrun has no isolated hosts to cut off
    first = _torchrun_job(cell, "first")
    if not cell.fault.resume:
        return first
    resumed_at = time.time()
    again = _torchrun_job(cell, "again")
    return dataclasses.replace(
        again, agent_logs=[*first.agent_logs, *again.agent_logs], resumed_at=resumed_at
    )


def _torchrun_job(cell: Cell, attempt: str) -> Ran:
    logs = [cell.work / f"agent-{n}-{attempt}.log" for n in (1, 2)]
    env = {
        **cell.env,
        "SM_MODEL_DIR": str(cell.work / "model"),
        "LOGLEVEL": "INFO",  # the agents' rendezvous lines, as tenter's agents log them
        # Its agents' shared store breaks the restarted round's workers (they read the
        # previous round's addresses); tenter sets the same for restartable jobs.
        "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
    }
    codes = _torchrun.run_agents(
        [FAULTY, TRAIN, "--checkpoint_dir", str(cell.work / "ckpt")],
        env,
        max_restarts=1,
        nnodes=f"{cell.fault.min_hosts}:2",
        # Hosts of their own, as tenter's simulated hosts: the first hosts the rendezvous
        # store and has group rank 0 (c10d orders hosts by address); the store's host cannot
        # be lost (torchrun's job dies with it), the second can.
        agent_flags=[
            [
                f"--local-addr=127.0.0.{n}",
                f"--rdzv-conf=last_call_timeout={LAST_CALL_S},is_host={n == 1:d}",
            ]
            for n in (1, 2)
        ],
        logs=logs,
        timeout=RUN_TIMEOUT_S,
    )
    # A lost host's agent was killed: the job succeeded if the other one did.
    code = min(codes, key=abs) if cell.fault.min_hosts < 2 else max(codes, key=abs)
    return Ran(code, logs, cell.work / "model/model.pt")


def _run(argv: list[str], env: dict[str, str]) -> int:
    try:
        return subprocess.run(
            argv,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
            timeout=RUN_TIMEOUT_S,
        ).returncode
    except subprocess.TimeoutExpired:
        return 124


# ---- measures ----

AGENT_REACTION = re.compile(
    r"^[IWE](\d\d)(\d\d) (\d\d:\d\d:\d\d\.\d+) .*"
    r"(failed \(exitcode|Detected \d+ new nodes|attempts to join the next round)"
)
"""A torch elastic log line saying an agent noticed a change: ``I1123 23:32:18.069000 PID
file:line] ...``, in local time (torchrun's agent; torch's rendezvous under either)."""
TENTER_AGENT_REACTION = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d+) tenter\.launch\.agent\S*: "
    r".*(failed \(exit code|hosts wait to join|joining the planned first round)"
)
"""tenter's agent's own line for the same: ``2026-11-23 23:32:18,069 tenter.launch.agent.host:
rank 1 (pid N) failed (exit code -9)``, in local time; a fixed job's first round (a resumed
run's, after a preemption) is its own, not torch's."""


def _reactions(logs: list[Path]) -> list[float]:
    year = datetime.date.today().year
    found = []
    for log in logs:
        for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
            match = AGENT_REACTION.match(line)
            if match:
                month, day, clock = match.group(1, 2, 3)
                when = datetime.datetime.strptime(
                    f"{year}-{month}-{day} {clock}", "%Y-%m-%d %H:%M:%S.%f"
                )
                found.append(when.timestamp())
            ours = TENTER_AGENT_REACTION.match(line)
            if ours:
                clock, millis = ours.group(1, 2)
                when = datetime.datetime.strptime(clock, "%Y-%m-%d %H:%M:%S")
                found.append(when.timestamp() + int(millis) / 1000)
    return found


@dataclass(frozen=True)
class Measure:
    detect_s: float
    recover_s: float
    lost_steps: int
    exact: bool | None
    """Whether the model equals the uninterrupted run's; None where it need not."""
    steps: list[tuple[float, int]]
    """Rank 0's steps: (seconds since the fault, step)."""


def measure(cell: Cell, ran: Ran, reference: dict[str, torch.Tensor] | None) -> Measure | None:
    times = cell.env["TIMES_DIR"]
    try:
        fault = float(Path(times, "fault").read_text())
        lines = Path(times, "steps-0").read_text().split()
    except OSError:
        return None
    steps = [(float(t) - fault, int(s)) for t, s in zip(lines[::2], lines[1::2], strict=True)]
    before = [s for t, s in steps if t < 0]
    after = [(t, s) for t, s in steps if t >= 0]
    if ran.code != 0 or not before or not after:
        return None
    if ran.resumed_at is not None:
        # A preempted job: the steps until it stopped are not a recovery; its next run's are.
        resumed = ran.resumed_at - fault
        first = next(((t, s) for t, s in after if t >= resumed), after[-1])
    else:
        first = first_recovered(max((t, s) for t, s in steps if t < 0), after)
    reacted = [t - fault for t in [*_reactions(ran.agent_logs), *ran.noticed] if t >= fault]
    exact = None
    if cell.fault.exact and ran.comparable and reference is not None:
        model = torch.load(ran.model) if ran.model.exists() else {}
        exact = model.keys() == reference.keys() and all(
            torch.equal(model[k], v) for k, v in reference.items()
        )
    return Measure(
        detect_s=min(reacted) if reacted else float("nan"),
        recover_s=first[0],
        lost_steps=lost_steps(steps, first[0]),
        exact=exact,
        steps=steps,
    )


# ---- the run ----


def _cell_env(times: Path, fault: Fault) -> dict[str, str]:
    times.mkdir(parents=True)
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "TIMES_DIR": str(times),
        "FAULT": fault.action,
        "FAULT_RANK": str(fault.rank),
        "FAULT_STEP": str(FAULT_STEP),
    }


def _reference(tmp: Path) -> dict[str, torch.Tensor] | None:
    """The model of an uninterrupted run (no rank faults)."""
    fault = Fault("kill_worker", rank=-1, min_hosts=2, exact=True)
    work = tmp / "reference"
    ran = run_tenter(Cell("none", fault, work, _cell_env(work / "times", fault)))
    return torch.load(ran.model) if ran is not None and ran.code == 0 else None


def _plot(name: str, runs: dict[str, list[Measure]]) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for strategy_name, measures in runs.items():
        if measures:
            m = measures[0]
            ax.plot([t for t, _ in m.steps], [s for _, s in m.steps], ".-", label=strategy_name)
    ax.axvline(0, color="red", linestyle="--", label=f"fault at step {FAULT_STEP}")
    ax.set(xlabel="seconds since the fault", ylabel="step (rank 0)", title=f"recovery: {name}")
    ax.legend()
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"recovery_{name}.png"
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}" if values else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--keep", metavar="DIR", help="run in DIR and keep the runs' files")
    args = parser.parse_args()
    scenarios, strategies = args.scenarios.split(","), args.strategies.split(",")
    for name, known in (("scenario", SCENARIOS), ("strategy", STRATEGIES)):
        chosen = scenarios if name == "scenario" else strategies
        unknown = set(chosen) - set(known)
        if unknown:
            parser.error(f"unknown {name} {sorted(unknown)}; known: {', '.join(known)}")
    results: dict[tuple[str, str], list[Measure]] = {
        (sc, st): [] for sc in scenarios for st in strategies
    }
    failed = dict.fromkeys(results, 0)
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or scratch
        reference = _reference(Path(tmp))
        if reference is None:
            print("the uninterrupted reference run failed: exactness is not checked")
        for rep in range(args.reps):
            for sc in scenarios:
                fault = SCENARIOS[sc]()
                for st in strategies:
                    work = Path(tmp) / f"{sc}-{st}-{rep}"
                    cell = Cell(sc, fault, work, _cell_env(work / "times", fault))
                    ran = STRATEGIES[st](cell)
                    if ran is None:
                        print(f"recovery scenario={sc} strategy={st} n/a", flush=True)
                        continue
                    m = measure(cell, ran, reference)
                    if m is None:
                        failed[sc, st] += 1
                        print(f"recovery scenario={sc} strategy={st} failed", flush=True)
                        continue
                    results[sc, st].append(m)
                    print(
                        f"recovery scenario={sc} strategy={st} detect_s={m.detect_s:.2f} "
                        f"recover_s={m.recover_s:.2f} lost_steps={m.lost_steps}",
                        flush=True,
                    )
    print(f"\nmedians of {args.reps} runs (2 hosts x 2 processes, fault at step {FAULT_STEP})")
    print(
        f"{'scenario':12s} {'strategy':10s} {'detect_s':>8s} {'recover_s':>9s} "
        f"{'lost':>4s} {'exact':>6s} {'failed':>6s} {'vs torchrun':>11s}"
    )
    for (sc, st), ms in results.items():
        recover = [m.recover_s for m in ms]
        anchor = [m.recover_s for m in results.get((sc, "torchrun"), [])]
        ratio = (
            f"{statistics.median(anchor) / statistics.median(recover):.1f}x faster"
            if recover and anchor and st != "torchrun"
            else ""
        )
        exact = {m.exact for m in ms}
        shown = "n/a" if exact <= {None} else "yes" if exact == {True} else "NO"
        lost = _median([float(m.lost_steps) for m in ms])
        print(
            f"{sc:12s} {st:10s} {_median([m.detect_s for m in ms]):>8s} {_median(recover):>9s} "
            f"{lost:>4s} {shown:>6s} {failed[sc, st]:>6d} {ratio:>11s}"
        )
    for sc in scenarios:
        path = _plot(sc, {st: results[sc, st] for st in strategies})
        print(f"timeline: {path.relative_to(REPO)}")


if __name__ == "__main__":
    main()
