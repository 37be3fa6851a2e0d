"""``python -m tenter.runtime.bootstrap SCRIPT [ARGS...]`` or ``... -m MODULE [ARGS...]``.

Runs the user's Python entry point exactly as ``python SCRIPT`` / ``python -m MODULE``
would (``sys.argv``, ``sys.path[0]``, ``__main__``), inside torch elastic's ``record``:
an uncaught exception is written with its traceback and timestamp to the rank's error
file (``TORCHELASTIC_ERROR_FILE``), which the launcher's failure summary reads. Scripts
need no ``@record`` decorator of their own.
"""

from __future__ import annotations

import os
import runpy
import sys

from torch.distributed.elastic.multiprocessing.errors import record


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


if __name__ == "__main__":
    record(run)(sys.argv[1:])
