"""``python -m tenter.runtime.bootstrap SCRIPT [ARGS...]`` or ``... -m MODULE [ARGS...]``.

Runs the user's Python entry point exactly as ``python SCRIPT`` / ``python -m MODULE``
would (``sys.argv``, ``sys.path[0]``, ``__main__``). When it fails (an uncaught exception,
or ``sys.exit`` with a non-zero status) the traceback is printed as Python would, then
recorded in the rank's error file (``TORCHELASTIC_ERROR_FILE``, in torch elastic's format).

The error file is written the moment the failure happens, before the process's slow
teardown (interpreter finalisation with torch loaded can take a second): the launcher
watches for it to stop the job at once and to name the root cause with its traceback.
Scripts need no ``@record`` decorator of their own.

``python -m tenter.runtime.bootstrap --warm [MODULE...]`` is a warm worker: it imports what a
worker imports (and MODULEs), then waits for its rank's handoff from the agent and runs it as above
(:mod:`tenter.runtime.warm`).

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
import os
import runpy
import signal
import sys
import time
import traceback

import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import get_error_handler

from tenter.contract.torchrun import finished_marker
from tenter.runtime import warm


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


TORCH_AGENT_SIGNALS = "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
"""torch elastic's default for ``TORCHELASTIC_SIGNALS_TO_HANDLE``: the signals its agent
handles (``PContext.start``) before it starts the workers."""


def _reset_signals_as_torchrun() -> None:
    """Start the script with the signal dispositions a worker of torchrun has.

    torchrun's agent installs Python handlers for the signals of
    ``TORCHELASTIC_SIGNALS_TO_HANDLE`` before it starts its workers, so each worker's
    ``exec`` resets them to the default, and Python then gives SIGINT its
    ``KeyboardInterrupt`` handler: whatever the agent inherited. Checked with torch 2.13,
    ``setsid python -m torch.distributed.run ... < /dev/null &`` from a non-interactive
    shell, which starts the launcher with SIGINT and SIGQUIT ignored: its worker has
    SIGINT's Python handler and SIGTERM, SIGHUP and SIGQUIT at SIG_DFL, where a plain
    ``python`` started the same way keeps SIGINT and SIGQUIT ignored. A warm spare was started
    when its agent was wherever it was (ignoring stop signals while it stops workers, or before
    its handlers exist, as started by such a shell): without this it would hand those ignored
    signals to the script, and Ctrl-C would not interrupt a restarted rank.
    """
    for name in os.environ.get("TORCHELASTIC_SIGNALS_TO_HANDLE", TORCH_AGENT_SIGNALS).split(","):
        sig = getattr(signal, name.strip(), None)
        if sig == signal.SIGINT:
            signal.signal(sig, signal.default_int_handler)
        elif isinstance(sig, signal.Signals):
            signal.signal(sig, signal.SIG_DFL)


def _finish() -> None:
    """The script returned: say so, then release what it left for interpreter teardown."""
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


def main(argv: list[str]) -> int:
    if argv[:1] == [warm.WAIT_FLAG]:
        warm.preload(argv[1:])
        handoff = warm.receive()
        if handoff is None:  # a spare no rank needed
            return 0
        argv = warm.become(handoff)
    _reset_signals_as_torchrun()
    handler = get_error_handler()
    handler.initialize()  # a fatal signal (SIGSEGV...) also leaves a Python stack in the file
    watch_file = os.environ.get("TENTER_WATCH_FILE")
    if watch_file:
        from tenter.runtime import watchdog

        watchdog.install(watch_file)
    try:
        run(argv)
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
