"""The CLI's argument parser and its error output: light (no spec, no pydantic), as every
command's start-up pays for what this imports; ``tenter status`` must answer within a second."""

from __future__ import annotations

import argparse
import difflib
import sys
from collections.abc import Sequence
from functools import cache
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from rich.console import Console

EXIT_USAGE = 2
"""Bad input (flags, spec, a failed preflight): nothing was created and nothing launched."""


@cache
def error_console() -> Console:
    """The CLI's console on stderr, made on first use: importing rich is a good part of a light
    command's start-up (``tenter status``), which prints no error."""
    from rich.console import Console

    # soft_wrap: a log file or CI console must get the lines whole, not cut at 80 columns.
    return Console(stderr=True, highlight=False, soft_wrap=True)


def __getattr__(name: str) -> Console:
    """``stderr``: :func:`error_console`."""
    if name != "stderr":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return error_console()


class FlagParser(argparse.ArgumentParser):
    """argparse, with errors that say what to do: an unknown flag names the closest known
    one ("Did you mean --nproc-per-node?"), where argparse would print the top-level usage.
    Abbreviations are off: ``--nproc`` must not silently mean ``--nproc-per-node``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        argv = list(sys.argv[1:] if args is None else args)
        parsed, extras = super().parse_known_args(argv, namespace)
        module = getattr(parsed, "module", None)
        after = argv.index(module) + 1 if module in argv else len(argv)
        if extras and extras[0] in argv[after:]:
            # torchrun's ``-m MODULE ARGS...``: from the first flag tenter does not know on,
            # everything after the module is the module's.
            first = argv.index(extras[0], after)
            parsed, extras = super().parse_known_args([*argv[:first], "--", *argv[first:]])
        for extra in extras:
            if extra.startswith("-"):
                self.error(self._unknown_flag(extra.partition("=")[0]))
        if extras:
            self.error(f"unexpected argument '{extras[0]}'. See `{self.prog} --help`")
        _keep_script_separator(argv, parsed)
        return parsed, extras

    def _unknown_flag(self, flag: str) -> str:
        from tenter.cli.torchrun_flags import UNSUPPORTED  # the spec catalog: only when needed

        instead = UNSUPPORTED.get(flag.replace("_", "-"))
        if instead:
            return f"{flag} is a torchrun flag tenter does not take: {instead}"
        known = [o for action in self._actions for o in action.option_strings]
        # A flag cut short (``--nproc``) is best matched by what it starts; else by spelling.
        close = [o for o in known if o.startswith(flag)] or difflib.get_close_matches(
            flag, known, n=1
        )
        hint = f" Did you mean {close[0]}?" if close else ""
        return f"unknown flag {flag}.{hint} See `{self.prog} --help`"

    def error(self, message: str) -> NoReturn:
        # argparse's "PROG: error: MESSAGE", without the usage block it prints above it.
        from rich.markup import escape

        error_console().print(f"{escape(self.prog)}: [bold red]error:[/] {escape(message)}")
        self.exit(EXIT_USAGE)


def _keep_script_separator(argv: list[str], parsed: argparse.Namespace) -> None:
    """Put back the ``--`` of ``SPEC|SCRIPT -- ARGS`` that argparse drops: right after a
    positional it takes ``--`` for the end of its own options, so ``job.yaml -- --seed 1``
    would read as ``job.yaml --seed 1`` (``--seed``: a flag after a spec file)."""
    target, rest = getattr(parsed, "target", None), getattr(parsed, "args", None)
    if target is None or rest is None:
        return
    separator = len(argv) - len(rest) - 1
    if separator >= 1 and argv[separator] == "--" and argv[separator - 1] == target:
        parsed.args = ["--", *rest]
