"""A light rank: what a training rank shows tenter's control plane, without torch.

It steps every ``TENTER_REHEARSAL_STEP_S`` seconds and writes, each step, the records a real
rank writes: its progress record (:class:`tenter.runtime.progress_record.ProgressRecord`, as
the watchdog's DDP step counter does), its counted step (``metrics/steps/rank-N.jsonl``, as
:mod:`tenter.runtime.steps`) and ``tenter.report``'s metrics line. SIGUSR1 writes its stacks
(faulthandler, as the watchdog installs it). Between two steps it reads the rehearsal's
commands (:mod:`tenter.rehearsal.commands`, one ``stat`` of the control folder a step):

- a host the launcher declared lost: the rank fails as a peer's broken connection would fail
  it (its error file says ``Connection closed by peer``), as a real collective would;
- a hang: every rank but the culprit enters the all-reduce after the culprit's last step and
  never leaves it (the culprit is SIGSTOPped by the rehearsal, so it never enters it);
- a slow-down factor for one rank (a straggler: it ends each step ``factor - 1`` step
  times after the others);
- finish: the rank returns after its step, as a script that is done.

A kill is tenter's own (``tenter fault JOB kill --rank N``: the agent SIGKILLs the rank).

``python -m tenter.rehearsal.rank --warm`` is a host's template of light ranks, as the
bootstrap's ``--warm`` is of torch workers (:mod:`tenter.runtime.warm`'s protocol, served
to the agent's real :class:`~tenter.launch.agent.spares.WarmPool`,
:class:`tenter.rehearsal.pack.LightPool`):
a group restart of 512 ranks is 512 forks of a few milliseconds, not 512 interpreter starts
(20-30 ms of CPU each, which on 2 cores outlasted the hang timeout).
"""

from __future__ import annotations

import faulthandler
import json
import math
import os
import signal
import sys
import time
from pathlib import Path

from tenter.jobdir import layout
from tenter.jobdir.control import control_dir, lost_hosts
from tenter.jobdir.line_files import BufferedLines
from tenter.monitor import reporter
from tenter.rehearsal import commands
from tenter.runtime import warm
from tenter.runtime.progress_record import EXITING, ProgressRecord

STEP_ENV = "TENTER_REHEARSAL_STEP_S"
DEFAULT_STEP_S = 0.5
SAMPLES_PER_STEP = 32


class LightRank:
    def __init__(self, environ: dict[str, str]) -> None:
        self.job_dir = environ["TENTER_JOB_DIR"]
        self.rank = layout.worker_rank(environ)
        self.step_s = float(environ.get(STEP_ENV, DEFAULT_STEP_S))
        self.error_file = environ.get("TORCHELASTIC_ERROR_FILE", "")
        watch = environ.get("TENTER_WATCH_FILE")
        self.record = ProgressRecord(watch) if watch else None
        if watch:
            stem = layout.rank_stem(watch, layout.WATCH_SUFFIX)
            stacks = open(layout.stacks_file(stem), "w")  # noqa: SIM115 (lives with the process)
            faulthandler.register(signal.SIGUSR1, file=stacks, all_threads=True)
        self.steps = BufferedLines(layout.rank_steps_file(self.job_dir, self.rank))
        self.lost_at_start = lost_hosts(self.job_dir)
        self.control = control_dir(self.job_dir)
        self.control_mtime = 0
        self.slow = 1.0
        round_key = environ.get("TORCHELASTIC_RESTART_COUNT", "0")
        self.round_start = commands.round_start(
            self.job_dir, round_key, math.floor(time.time() / self.step_s)
        )

    def run(self) -> int:
        while True:
            step = self._next_step()
            if self.record is not None:
                self.record.step = step
                self.record.write("step")
            self.steps.add({"time": time.time(), "step": step})
            reporter.report(step=step, samples=SAMPLES_PER_STEP, loss=1.0 / step)
            code = self._obey(step)
            if code is not None:
                return code

    def _next_step(self) -> int:
        """Wait for the next step, and its number. A real job's all-reduce a step keeps its
        ranks in lockstep; light ranks keep it by the clock: every rank of a round ends its
        step n at the round's first tick (:func:`commands.round_start`) plus n steps (a rank
        that starts late joins at the step then due), a slowed rank that much later."""
        now = time.time()
        tick = math.floor(now / self.step_s) + 1
        time.sleep(max(0.0, tick * self.step_s - now + (self.slow - 1) * self.step_s))
        return tick - self.round_start

    def _obey(self, step: int) -> int | None:
        """The rehearsal's commands, when the control folder changed: an exit code to end."""
        try:
            mtime = os.stat(self.control).st_mtime_ns
        except OSError:
            return None
        if mtime == self.control_mtime:
            return None
        self.control_mtime = mtime
        if lost_hosts(self.job_dir) - self.lost_at_start:
            self._fail_as_peer("Connection closed by peer: a host of the job was lost")
            return 1
        hang = commands.hang_culprit(self.job_dir)
        if hang is not None and hang[0] != self.rank:
            self._block_in_collective(hang[1] + 1)
        self.slow = commands.slow_factor(self.job_dir, self.rank)
        if commands.finish_requested(self.job_dir):
            self.steps.flush()
            reporter.flush()
            if self.record is not None:
                self.record.write(EXITING)
            return 0
        return None

    def _block_in_collective(self, step: int) -> None:
        """Enter step ``step``'s all-reduce, which the culprit never joins: the process waits
        until stopped. A rank reads the command after its own step, which may be a step past
        the culprit's: every waiting rank is put where a real all-reduce would hold it, at
        the collective after the culprit's last step."""
        if self.record is not None:
            self.record.step = step
            self.record.seq = step
            self.record.op = "all_reduce"
            self.record.write("entered")
        self.steps.flush()
        while True:
            signal.pause()

    def _fail_as_peer(self, message: str) -> None:
        if self.error_file:
            error = {"message": {"message": f"RuntimeError: {message}", "extraInfo": {}}}
            Path(self.error_file).write_text(json.dumps(error))
        print(message, file=sys.stderr, flush=True)


def main(argv: list[str]) -> int:
    if argv[:1] == [warm.WAIT_FLAG]:
        handoff = warm.serve([])  # returns in a forked spare only
        if handoff is None:  # no rank needed it
            return 0
        warm.become(handoff)
    return LightRank(dict(os.environ)).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
