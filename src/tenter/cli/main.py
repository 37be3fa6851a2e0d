"""``tenter``: run, plan and inspect distributed PyTorch jobs.

Exit codes are one table for every subcommand: :mod:`tenter.errors`.

Each subcommand lives in ``tenter/cli/cmd_<name>.py`` and exposes ``add_parser(subparsers)``,
which registers its parser with ``func`` set to a callable taking the parsed arguments and
returning the exit code. Adding a subcommand is one module and one line in COMMANDS.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys

from tenter import __version__
from tenter.cli.parsing import EXIT_USAGE, FlagParser, error_console
from tenter.errors import TenterError

COMMANDS = (
    "run",
    "plan",
    "perf",
    "doctor",
    "container",
    "join",
    "fault",
    "k8s",
    "status",
    "logs",
    "cancel",
    "report",
    "scale",
    "data",
    "rehearse",
)


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``command`` alone (its module alone imported: ``tenter status`` starts
    in a fraction of a second), or of every command where it is None or not one of COMMANDS
    (``tenter --help`` lists them all; a misspelt command gets argparse's choices)."""
    parser = FlagParser(
        prog="tenter",
        description="Run distributed PyTorch jobs from one spec: on this machine (simulated "
        "hosts), through mpirun, on Slurm or Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"tenter {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in (command,) if command in COMMANDS else COMMANDS:
        importlib.import_module(f"tenter.cli.cmd_{name}").add_parser(sub)
    return parser


def _print_error(text: str) -> None:
    """Every subcommand's errors look alike: ``error: <where>: <what>. Fix: <how>``."""
    from rich.markup import escape

    error_console().print(f"[bold red]error:[/] {escape(text)}")


def _is_spec_error(error: ValueError) -> bool:
    """A :class:`~tenter.spec.SpecError`, without importing the spec where no command did
    (pydantic and the instance catalog: most of a light command's start-up)."""
    spec_errors = sys.modules.get("tenter.spec.errors")
    return spec_errors is not None and isinstance(error, spec_errors.SpecError)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv[0] if argv else None).parse_args(argv)
    try:
        return int(args.func(args))
    except TenterError as e:
        _print_error(str(e))
        return int(e.exit_code)
    except ValueError as e:
        if not _is_spec_error(e):
            raise
        _print_error(str(e))
        return EXIT_USAGE
    except BrokenPipeError:
        # `tenter plan ... | head`: the reader left; not an error of ours.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def entry() -> None:
    """The ``tenter`` command: :func:`main`, then an exit that skips collecting torch's objects
    (:func:`tenter.runtime.bootstrap.exit_fast`: a launcher that served the rendezvous has
    torch.distributed loaded, and whoever waits for the job waits for its teardown too)."""
    code = main()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    entry()
