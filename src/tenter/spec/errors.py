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

    def __str__(self) -> str:
        return clip(f"{self.path}: {self.message}" if self.path else self.message)


class SpecError(ValueError):
    """The job spec cannot run as written. Carries every problem found."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = list(problems)
        super().__init__(self.render())

    def render(self) -> str:
        n = len(self.problems)
        head = "the job spec has 1 problem:" if n == 1 else f"the job spec has {n:,} problems:"
        lines = [head, *(f"  - {p}" for p in self.problems[:MAX_SHOWN])]
        if n > MAX_SHOWN:
            lines.append(f"  ... and {n - MAX_SHOWN:,} more")
        return "\n".join(lines)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A ' Did you mean ...?' suffix, or '' when nothing is close (nor ``word`` itself)."""
    close = difflib.get_close_matches(word, [c for c in choices if c != word], n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else ""
