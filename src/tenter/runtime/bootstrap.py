"""``python -m tenter.runtime.bootstrap SCRIPT [ARGS...]`` or ``... -m MODULE [ARGS...]``.

Runs the user's Python entry point exactly as ``python SCRIPT`` / ``python -m MODULE``
would (``sys.argv``, ``sys.path[0]``, ``__main__``). When it fails (an uncaught exception,
or ``sys.exit`` with a non-zero status) the traceback is printed as Python would, then
recorded in the rank's error file (``TORCHELASTIC_ERROR_FILE``, in torch elastic's format).

The error file is written the moment the failure happens, before the process's slow
teardown (interpreter finalisation with torch loaded can take a second): the launcher
watches for it to stop the job at once and to name the root cause with its traceback.
Scripts need no ``@record`` decorator of their own.

Every worker, fresh or warm, is titled with the user's command line (:func:`title`, through
``setproctitle``): ``ps`` shows ``python train.py --lr 0.1``, not the bootstrap.

``python -m tenter.runtime.bootstrap --warm [MODULE...]`` is a host's warm template: it imports
what a worker imports, then forks spares for the agent (and imports MODULEs when asked); a
spare waits for its rank's handoff and runs it as above (:mod:`tenter.runtime.warm`).

When the script returns (or exits with status 0) the bootstrap marks the rank finished
(:func:`tenter.contract.torchrun.finished_marker`) and tears down what the script left: a
default process group it never destroyed is destroyed, and the fault handler is switched
off. On torch 2.13 a script that skips ``destroy_process_group`` aborts in about half of
its gloo runs at exit ("terminate called without an active exception", SIGABRT: gloo's
threads are still joinable when the interpreter ends) under torchrun too; and the fault
handler, dumping every thread while they are being torn down, can itself crash (SIGSEGV).
"""

from __future__ import annotations

import faulthandler
import gc
import os
import runpy
import shlex
import sys
import time
import traceback

import setproctitle
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import get_error_handler

from tenter.contract.torchrun import finished_marker
from tenter.contract.worker import BOOTSTRAP
from tenter.jobdir import layout
from tenter.runtime import steps, warm
from tenter.runtime.preemption import Preempted


def run(argv: list[str]) -> None:
    if argv[:1] == ["-m"] and len(argv) >= 2:
        sys.argv = [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv:
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
        runpy.run_path(argv[0], run_name="__main__")
    else:
        raise SystemExit("usage: python -m tenter.runtime.bootstrap SCRIPT|-m MODULE [ARGS...]")


def _finish() -> None:
    """The script returned: say so, then release what it left for interpreter teardown."""
    steps.finish()
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file:
        try:
            with open(finished_marker(error_file), "w") as marker:
                marker.write(f"{time.time()}\n")
        except OSError as e:  # the marker informs the report; the script's success stands
            print(f"tenter: cannot mark the rank finished: {e}", file=sys.stderr)
    if dist.is_available() and dist.is_initialized():
        try:
            dist.destroy_process_group()
        except Exception as e:  # the script succeeded; tenter's own cleanup must not fail it
            print(f"tenter: cannot destroy the process group: {e}", file=sys.stderr)
    faulthandler.disable()


def title(argv: list[str]) -> str:
    """The process title of a worker running ``argv``: the user's command line, as ``python
    SCRIPT ARGS`` or ``python -m MODULE ARGS`` would show it, so that ``ps``, ``top``,
    ``nvidia-smi`` and ``pkill -f SCRIPT`` name the script rather than the bootstrap."""
    return shlex.join([os.path.basename(sys.executable), *argv])


def set_title(text: str) -> None:
    """Title this process ``text``, within its arguments' memory: setproctitle's default would
    also take the environment's, and ``/proc/PID/environ`` (by which tenter finds a job's
    processes) would read empty. A fresh worker's arguments hold its title (the bootstrap's
    are longer); a warm one's end with :data:`tenter.runtime.warm.TITLE_ROOM`."""
    before = os.environ.get("SPT_NOENV")
    os.environ["SPT_NOENV"] = "1"  # read once, by the first call
    try:
        setproctitle.setproctitle(text)
    finally:
        if before is None:
            del os.environ["SPT_NOENV"]
        else:
            os.environ["SPT_NOENV"] = before


def main(argv: list[str]) -> int:
    if argv[:1] == [warm.WAIT_FLAG]:
        set_title(title(["-m", BOOTSTRAP, *(a for a in argv if a.strip())]))  # no TITLE_ROOM
        handoff = warm.serve(argv[1:])  # returns in a forked spare only
        if handoff is None:  # a spare no rank needed
            return 0
        argv = warm.become(handoff)
    set_title(title(argv))
    handler = get_error_handler()
    handler.initialize()  # a fatal signal (SIGSEGV...) also leaves a Python stack in the file
    watch_file = os.environ.get("TENTER_WATCH_FILE")
    if watch_file:
        from tenter.runtime import watchdog

        watchdog.install(watch_file)
    job_dir = os.environ.get("TENTER_JOB_DIR")
    if job_dir and os.environ.get("RANK", "").isdigit():
        steps.install(job_dir, layout.worker_rank(os.environ))
    try:
        run(argv)
    except Preempted:  # stopped after the preemption's final checkpoint: done, as a return
        _finish()
        return 0
    except SystemExit as e:
        if e.code in (None, 0):
            _finish()
            return 0
        if not isinstance(e.code, int):
            print(e.code, file=sys.stderr)
        sys.stderr.flush()
        handler.record_exception(e)
        return e.code if isinstance(e.code, int) else 1
    except BaseException as e:
        traceback.print_exc()
        sys.stderr.flush()
        handler.record_exception(e)
        return 1
    _finish()
    return 0


def exit_fast(code: int) -> int:
    """``code``, once the interpreter's teardown has nothing left to collect: without
    ``gc.freeze()`` its final collections walk every object torch made, 1.9-2.2 s of CPU for
    a worker with torch.distributed.checkpoint imported (0.15-0.55 s with it, measured on a
    2-CPU machine), paid by every worker at every exit, while the job waits for it: a
    preempted or finished job's end, a failed rank's restart. Objects freed by their
    reference counts (open files...) are freed as before; only cycles go uncollected."""
    gc.freeze()
    return code


if __name__ == "__main__":
    sys.exit(exit_fast(main(sys.argv[1:])))
