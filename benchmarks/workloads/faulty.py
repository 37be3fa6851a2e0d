"""Runs a training script (argv[1:]) unchanged, except that every rank appends
``<wall time> <step>`` to ``$TIMES_DIR/steps-<rank>`` after each step, and that rank
FAULT_RANK, on reaching step FAULT_STEP the first time (no ``$TIMES_DIR/fault`` yet), records
the time there and does FAULT (one of :data:`FAULTS`); ``STEP_SLEEP_S`` (default 0) makes each
step that much longer (under torchft a step without every replica group :data:`ALONE_STEP_S`
more). It also logs the sample indices the rank's ``ResumableSampler`` gave
for each step through :class:`tenter.data.ledger.SampleLog`, under ``$TIMES_DIR`` (so that
the runs of a job run again share one log: benchmarks/fault_campaign.py's sample ledger;
examples/torchft/train.py draws from ``tenter.runtime.ft.SampleDealer``, which logs its
committed steps in the job directory, the campaign's ledger there).
For benchmarks/recovery.py and benchmarks/fault_campaign.py; the same under tenter and
torchrun.

A step is seen where the script reports it: ``tenter.checkpoint.Checkpointer.maybe_save``
(examples/elastic/train.py) or ``tenter.runtime.ft.Progress.step`` (examples/torchft/train.py,
where a step counts once torchft committed it). Ranks are numbered job-wide (under torchft
``RANK`` is the replica group's own).
"""

import os
import runpy
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil

from tenter.checkpoint import Checkpointer, ResumableSampler, atomic, default_dir
from tenter.checkpoint.run_state import STATE_FILE
from tenter.data.ledger import SampleLog
from tenter.launch.launcher.isolation import faults
from tenter.runtime import ft


def kill_worker() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def raise_error() -> None:
    raise RuntimeError("a fault injected by benchmarks/workloads/faulty.py")


AGENTS = ("tenter.launch.agent", "torch.distributed.run")
"""What an agent's command line holds: tenter's, torchrun's."""


def _agent() -> psutil.Process:
    """This worker's agent: its parent under torchrun or a fresh tenter worker; its
    grandparent for a warm tenter worker (forked by its host's warm template)."""
    proc = psutil.Process(os.getppid())
    while not any(name in " ".join(proc.cmdline()) for name in AGENTS):
        parent = proc.parent()
        assert parent is not None, "a worker runs under an agent"
        proc = parent
    return proc


def kill_host() -> None:
    """The host goes down: its agent and all of its processes at once."""
    agent = _agent()
    for proc in [agent, *(p for p in agent.children(recursive=True) if p.pid != os.getpid())]:
        proc.kill()
    kill_worker()


def preempt() -> None:
    """The job is preempted: SIGTERM to its launchers, as a scheduler sends. Under tenter the
    launcher of this worker's agent; under torchrun every agent (torchrun has no launcher
    above its agents), which pass it on to their workers."""
    agent = _agent()
    if "torch.distributed.run" in " ".join(agent.cmdline()):
        starter = agent.parent()
        assert starter is not None
        agents = [p for p in starter.children() if "torch.distributed.run" in p.cmdline()]
        for proc in agents:
            proc.send_signal(signal.SIGTERM)
    else:
        launcher = agent.parent()
        assert launcher is not None
        launcher.send_signal(signal.SIGTERM)


def cancel_preempt() -> None:
    """A user preempts the job: ``tenter cancel --preempt`` (the same stop as SIGTERM). Not
    waited for: it returns once the job has stopped, which needs this rank's next step."""
    cancel = [sys.executable, "-m", "tenter", "cancel", "--preempt", os.environ["TENTER_JOB_DIR"]]
    subprocess.Popen(cancel, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def kill_launcher() -> None:
    """The launcher dies (SIGKILL): its agents and workers go with it."""
    launcher = _agent().parent()
    assert launcher is not None
    launcher.kill()


def _newest_state() -> Path:
    """The newest checkpoint's common state file (rank 0 wrote it)."""
    root = default_dir()
    latest = atomic.read_manifest(root).latest
    assert latest is not None, "a checkpoint before the fault"
    return root / latest.name / STATE_FILE


def flip_checkpoint_byte() -> None:
    """A byte of the newest checkpoint changes on disk, then this worker dies."""
    data = bytearray(_newest_state().read_bytes())
    data[len(data) // 2] ^= 0x01
    _newest_state().write_bytes(bytes(data))
    kill_worker()


def truncate_checkpoint() -> None:
    """The newest checkpoint loses its file's tail on disk, then this worker dies."""
    _newest_state().write_bytes(_newest_state().read_bytes()[:-100])
    kill_worker()


def freeze() -> None:
    """This rank stops (SIGSTOP) and never goes on: the others wait in its collectives."""
    os.kill(os.getpid(), signal.SIGSTOP)


def kill_in_checkpoint() -> None:
    """This rank (rank 0, which commits checkpoints) dies in its next checkpoint's write: the
    folder renamed into place, the manifest not yet replaced (atomic.py's crash point)."""
    atomic.crash_hook = lambda point: kill_worker() if point == "renamed" else None


def kill_twice() -> None:
    """This worker dies; then, while the job recovers, another (rank 1, as it starts again,
    before its rendezvous) dies too: see :func:`second_fault`."""
    kill_worker()


OOM_CGROUP = Path("/sys/fs/cgroup/memory")
"""cgroup v1's memory controller (this machine's cgroup v2 has none)."""


def out_of_memory() -> None:
    """This worker joins a memory cgroup of 64 MiB over its size, then allocates past it: the
    kernel's OOM killer SIGKILLs it. The cgroup's path goes to ``$TIMES_DIR/cgroup``, for the
    campaign to remove once the job is over."""
    cgroup = OOM_CGROUP / f"tenter-campaign-{os.getpid()}"
    cgroup.mkdir()
    (times / "cgroup").write_text(str(cgroup))
    limit = psutil.Process().memory_info().rss + (64 << 20)
    (cgroup / "memory.limit_in_bytes").write_text(str(limit))
    (cgroup / "cgroup.procs").write_text(str(os.getpid()))
    hog = [bytearray(16 << 20) for _ in range(64)]  # 1 GiB, touched: past the limit
    raise AssertionError(f"not OOM-killed under {cgroup} ({len(hog)} blocks)")


filler: Path | None = None
"""What :func:`fill_disk` wrote, until the checkpoint save it made fail is over."""


def fill_disk() -> None:
    """The checkpoint directory's file system (the campaign's small tmpfs) fills up: a file
    takes all of it but 16 KiB, until the next checkpoint save has failed for it; then space
    comes back (:func:`maybe_save` removes it)."""
    global filler
    root = default_dir()
    free = os.statvfs(root).f_bavail * os.statvfs(root).f_frsize
    filler = root / "filler"
    filler.write_bytes(bytes(max(free - (16 << 10), 0)))


def slow_down() -> None:
    """This rank turns slow: each of its steps from here on 0.3 s longer (a straggler)."""
    global STEP_SLEEP_S
    STEP_SLEEP_S += 0.3


JOIN_WAIT_S = 60.0
"""How long :func:`join_host`'s rank waits for the restart that lets the new host in."""


def join_host() -> None:
    """A host joins the running job (``tenter join``); the job restarts its workers to let it
    in, from the last checkpoint. This rank waits for that restart (the others wait in its
    next collective), so that the job does not end first."""
    join = [sys.executable, "-m", "tenter", "join", os.environ["TENTER_JOB_DIR"]]
    subprocess.run(join, stdout=subprocess.DEVNULL, check=True, timeout=JOIN_WAIT_S)
    time.sleep(JOIN_WAIT_S)  # a bound: the restart kills this worker long before
    raise RuntimeError(f"no restart let the joining host in within {JOIN_WAIT_S:.0f} s")


def fail_at_end() -> None:
    """This rank fails (exit 3) just as the others finish: once the script has returned, with
    the job's last step done and checkpointed (the fault's time is then)."""
    global fails_at_end
    fails_at_end = True


def partition_other_host() -> None:
    """The other host of a 2-host isolated job drops off the network (tenter's fault tool)."""
    faults.partition(os.environ["TENTER_JOB_DIR"], "algo-2")


FAULTS: dict[str, Callable[[], None]] = {
    "kill_worker": kill_worker,
    "raise_error": raise_error,
    "kill_host": kill_host,
    "preempt": preempt,
    "cancel_preempt": cancel_preempt,
    "kill_launcher": kill_launcher,
    "slow_down": slow_down,
    "freeze": freeze,
    "kill_in_checkpoint": kill_in_checkpoint,
    "kill_twice": kill_twice,
    "out_of_memory": out_of_memory,
    "fill_disk": fill_disk,
    "flip_checkpoint_byte": flip_checkpoint_byte,
    "truncate_checkpoint": truncate_checkpoint,
    "partition": partition_other_host,
    "join_host": join_host,
    "fail_at_end": fail_at_end,
}

times = Path(os.environ["TIMES_DIR"])
group_size = int(os.environ["WORLD_SIZE"]) if "REPLICA_GROUP_ID" in os.environ else 0
rank = str(int(os.environ.get("REPLICA_GROUP_ID", "0")) * group_size + int(os.environ["RANK"]))
steps = open(times / f"steps-{rank}", "a")  # noqa: SIM115 (open for the process's life)
fault_step = int(os.environ["FAULT_STEP"])
faulty = rank == os.environ["FAULT_RANK"] and not (times / "fault").exists()


def second_fault() -> None:
    """``kill_twice``'s second: rank 1 of the first restart dies as it starts."""
    first_restart = os.environ.get("TORCHELASTIC_RESTART_COUNT") == "1"
    mine = os.environ["FAULT"] == "kill_twice" and rank == "1" and first_restart
    if mine and not (times / "second-fault").exists():
        (times / "second-fault").write_text(repr(time.time()))
        kill_worker()


second_fault()
fails_at_end = False
last_step = -1
STEP_SLEEP_S = float(os.environ.get("STEP_SLEEP_S", "0"))
ALONE_STEP_S = 0.05
"""Under torchft, how much longer a step that not every replica group took part in is: with
``min_replicas`` 1 the group that starts first would otherwise run all 400 of its steps
(some 3 s) before the other has started, and the two train apart."""
samples = SampleLog(times, int(rank))
drawn: list[int] = []
"""The sample indices the sampler gave since the last step."""
drawn_epoch = 0
"""The epoch they are of."""


def record(step: int, everyone: bool = True) -> None:
    """``everyone``: every replica group takes part in this step (torchft lets a group train
    alone while the others start; a fault then would hit no one else)."""
    global faulty, last_step
    if step <= last_step and "REPLICA_GROUP_ID" in os.environ:
        return  # torchft did not commit this step: it is done again, not a new one
    last_step = step
    steps.write(f"{time.time()!r} {step}\n")
    steps.flush()
    samples.write(step, drawn_epoch, drawn)
    drawn.clear()
    time.sleep(STEP_SLEEP_S)  # a longer step (the example's take milliseconds)
    if not everyone:  # torchft, a group alone: paced, so that the others can join it
        time.sleep(ALONE_STEP_S)
    if faulty and step >= fault_step and everyone:
        faulty = False
        (times / "fault").write_text(repr(time.time()))
        FAULTS[os.environ["FAULT"]]()


def maybe_save(self: Checkpointer, step: int) -> bool:
    global filler
    saved = save(self, step)
    if filler is not None and self.every and step % self.every == 0:
        filler.unlink()  # fill_disk's save is over: space comes back
        filler = None
    record(step)
    return saved


def progress_step(self: ft.Progress) -> None:
    report(self)
    groups = int(os.environ["NUM_REPLICA_GROUPS"])
    record(self._manager.current_step(), self._manager.num_participants() == groups)


def logged_iter(self: ResumableSampler) -> Iterator[int]:
    global drawn_epoch
    drawn_epoch = self.epoch
    for index in sampler_iter(self):
        drawn.append(int(index))
        yield index


save, report = Checkpointer.maybe_save, ft.Progress.step
sampler_iter = ResumableSampler.__iter__
ResumableSampler.__iter__ = logged_iter  # type: ignore[method-assign]
Checkpointer.maybe_save = maybe_save  # type: ignore[method-assign]
ft.Progress.step = progress_step  # type: ignore[method-assign]
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
if fails_at_end:
    (times / "fault").write_text(repr(time.time()))
    sys.exit(3)
