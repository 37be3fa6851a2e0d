"""Spec problems: every one names the field path, the bad value and the fix.

Validation collects *all* problems before reporting, so a user fixes a spec in
one round instead of one error per launch attempt.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong (or suspicious, for warnings) with a job spec."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class SpecError(ValueError):
    """The job spec cannot run as written. Carries every problem found."""

    def __init__(self, problems: Iterable[Problem]) -> None:
        self.problems = list(problems)
        super().__init__(self.render())

    def render(self) -> str:
        n = len(self.problems)
        head = "the job spec has 1 problem:" if n == 1 else f"the job spec has {n} problems:"
        return "\n".join([head, *(f"  - {p}" for p in self.problems)])


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A ' Did you mean ...?' suffix, or '' when nothing is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" Did you mean '{close[0]}'?" if close else ""
