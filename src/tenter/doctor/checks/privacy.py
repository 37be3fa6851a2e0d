"""Privacy: whether other users of this machine (or of a shared file system) can read the
jobs' output directory. tenter makes each job directory its user's alone (0700), but the
output directory above lists every job, and a job made before (or by hand) may be open."""

from __future__ import annotations

import stat
from pathlib import Path

from tenter.doctor.result import Check, CheckResult, Context
from tenter.jobdir.lookup import jobs_dir

_OTHERS_READ = stat.S_IROTH | stat.S_IXOTH


def _open_to_others(path: Path) -> bool:
    return bool(path.stat().st_mode & _OTHERS_READ)


def _output_dir(ctx: Context) -> CheckResult:
    named = Path(ctx.job.output_dir) if ctx.job and ctx.job.output_dir else jobs_dir()
    folder = ctx.system.path(str(named))
    if not folder.is_dir():
        return CheckResult.ok(f"{named} does not exist yet (tenter makes it)")
    open_jobs = [p.name for p in folder.iterdir() if p.is_dir() and _open_to_others(p)]
    mode = stat.filemode(folder.stat().st_mode)
    if not _open_to_others(folder) and not open_jobs:
        return CheckResult.ok(f"{named} ({mode}): other users cannot read it")
    found = f"{named} ({mode}) is readable by every user"
    if open_jobs:
        found += f"; so are {len(open_jobs)} folders in it (e.g. {open_jobs[0]})"
    return CheckResult.warn(
        found, f"chmod -R o-rwx {named} (docs/security.md; output_group shares with a group)"
    )


OUTPUT_DIR = Check(
    "output-dir",
    "the jobs' output directory is not readable by other users",
    _output_dir,
    preflight=False,
)
