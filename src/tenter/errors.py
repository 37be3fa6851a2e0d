"""tenter's exit codes and the errors that carry them: one table for every subcommand.

=====  ==========================================================================
code   meaning
=====  ==========================================================================
0      the job succeeded (or the command did what it was asked)
1      the job failed: a rank failed; the summary names the root cause and its own
       exit status (a signal, an exit code)
2      bad input (spec, flags, a failed preflight): nothing was created or started
3      the backend refused the job (sbatch, the Kubernetes API server)
4      no such job (``tenter status|logs|cancel JOB``)
5      a tool or an optional dependency is missing (mpirun, sbatch, matplotlib...)
75     preempted: SIGTERM or ``tenter cancel --preempt`` reached every rank and a final
       checkpoint was made; run the same command again to resume (BSD's EX_TEMPFAIL: a
       temporary condition, try again later). Without a final checkpoint: 130
124    stopped by ``max_run``
125    stopped as hung (``elastic.hang_timeout``)
130    interrupted: Ctrl-C, SIGHUP or ``tenter cancel``
=====  ==========================================================================

Torch-free and import-free: every layer may raise these.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    JOB_FAILED = 1
    BAD_INPUT = 2
    BACKEND_REFUSED = 3
    NO_SUCH_JOB = 4
    MISSING_TOOL = 5
    PREEMPTED = 75
    MAX_RUN = 124
    HANG = 125
    INTERRUPTED = 130


class TenterError(Exception):
    """An error reported to the user as ``error: <where>: <what>. Fix: <how>`` and its exit
    code; never with a traceback."""

    exit_code: ExitCode = ExitCode.BAD_INPUT

    def __init__(self, where: str, what: str, fix: str = "") -> None:
        self.where, self.what, self.fix = where, what, fix
        text = f"{where}: {what}" if where else what
        super().__init__(with_fix(text, fix))


def with_fix(what: str, fix: str) -> str:
    """``<what>. Fix: <fix>``, the form of every error (a question ends ``what`` as it is), or
    ``what`` alone without a fix."""
    if not fix:
        return what
    return f"{what if what.endswith('?') else what.rstrip('.') + '.'} Fix: {fix}"


class BackendRefusedError(TenterError):
    """The backend would not take the job (sbatch's rejection, the API server's refusal)."""

    exit_code = ExitCode.BACKEND_REFUSED


class JobNotFoundError(TenterError):
    exit_code = ExitCode.NO_SUCH_JOB


class MissingToolError(TenterError):
    """A program or an optional Python package the command needs is not installed."""

    exit_code = ExitCode.MISSING_TOOL
