"""Spec problems: every one names the field path, the bad value and the fix.

Validation collects *all* problems before reporting, so a user fixes a spec in
one round instead of one error per launch attempt. The report stays short whatever
the input: at most :data:`MAX_SHOWN` problems of at most :data:`MAX_LINE` characters,
and values are echoed abbreviated (a spec can hold a 5 MB string or a YAML alias bomb).
"""

from __future__ import annotations

import difflib
import reprlib
from collections.abc import Iterable
from dataclasses import dataclass

from tenter.errors import with_fix

MAX_SHOWN = 10
"""Problems listed in a report; the rest are counted ("and 299,990 more")."""
MAX_LINE = 500
"""Characters of one listed problem: with MAX_SHOWN, a report stays under ~5 KB."""

# reprlib abbreviates by construction (and in bounded time, whatever the nesting), which
# a repr() followed by a cut would not: repr() of a 5 MB value builds the 5 MB first.
_short_repr = reprlib.Repr()
_short_repr.maxstring = 60
_short_repr.maxlong = 40
_short_repr.maxother = 60
_short_repr.maxlevel = 2
_short_repr.maxlist = _short_repr.maxtuple = _short_repr.maxdict = 4
_short_repr.maxset = _short_repr.maxfrozenset = 4


def show(value: object) -> str:
    """``value`` as a short repr, for quoting user input in a message."""
    return _short_repr.repr(value)


def clip(text: str, limit: int = MAX_LINE) -> str:
    """``text`` cut to ``limit`` characters, marking the cut."""
    if len(text) <= limit:
        return text
    mark = f"... ({len(text):,} chars)"
    return text[: limit - len(mark)] + mark


@dataclass(frozen=True)
class Problem:
    """One thing wrong (or suspicious, for warnings) with a job spec."""

    path: str
    message: str
    """What is wrong."""
    fix: str = ""
    """How to fix it: shown as ``<path>: <message>. Fix: <fix>``, the form of every error."""

    def __str__(self) -> str:
        return clip(
            with_fix(f"{self.path}: {self.message}" if self.path else self.message, self.fix)
        )


class FieldError(ValueError):
    """A field's validator's refusal, its fix apart (``str()``: what is wrong), so that the
    problem pydantic reports keeps the two fields of a :class:`Problem`."""

    def __init__(self, what: str, fix: str) -> None:
        super().__init__(what)
        self.what, self.fix = what, fix


class SpecError(ValueError):
    """The job spec cannot run as written. Carries every problem found."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = list(problems)
        super().__init__(self.render())

    def render(self) -> str:
        """One problem: ``<path>: <message>. Fix: <fix>``, as every error prints; several: a
        list of them."""
        n = len(self.problems)
        if n == 1:
            return str(self.problems[0])
        lines = [
            f"the job spec has {n:,} problems:",
            *(f"  - {p}" for p in self.problems[:MAX_SHOWN]),
        ]
        if n > MAX_SHOWN:
            lines.append(f"  ... and {n - MAX_SHOWN:,} more")
        return "\n".join(lines)


def counted(n: int, one: str, many: str = "") -> str:
    """``n`` with its noun in the number it needs: ``1 host``, ``2 hosts``, ``1 process``,
    ``3 processes`` (``many``: an irregular plural). Every count before a noun in a message to
    a user goes through here."""
    plural = many or one + ("es" if one.endswith(("s", "x", "ch", "sh")) else "s")
    return f"{n:,} {one if n == 1 else plural}"


def closest(word: str, choices: Iterable[str]) -> str | None:
    """The choice spelled most like ``word`` (not ``word`` itself), or None when none is close."""
    close = difflib.get_close_matches(word, [c for c in choices if c != word], n=1, cutoff=0.6)
    return close[0] if close else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A ' Did you mean ...?' suffix, or '' when nothing is close (nor ``word`` itself)."""
    close = closest(word, choices)
    return f" Did you mean '{close}'?" if close else ""
