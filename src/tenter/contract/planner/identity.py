"""A job's names: its id, its identity (what makes two runs the same job, so that the second
resumes the first), where its directory and its checkpoints are."""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
from pathlib import Path

from tenter.contract import worker
from tenter.jobdir import layout
from tenter.spec import JobSpec


def new_job_id(name: str) -> str:
    """``<name>-<UTC timestamp>-<4 hex>``: unique, sortable, readable."""
    return f"{name}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}-{secrets.token_hex(2)}"


def jobs_root(spec: JobSpec, tenter_home: Path) -> Path:
    return Path(spec.output_dir) if spec.output_dir else tenter_home / "jobs"


def job_identity(spec: JobSpec) -> str:
    """What makes two runs the same job, so that the second resumes the first: its name and
    what it runs (the working directory and the script, module or command), as
    ``<name>-<entry>-<8 hex>``. Neither the hosts, the hyperparameters nor the script's
    arguments take part: a job resumed on fewer hosts, or with a changed learning rate, is
    the same job (SageMaker's anchor: one ``checkpoint_s3_uri`` for every run of a job)."""
    what = [spec.source_dir, spec.entry_point, spec.module, spec.command]
    digest = hashlib.sha256(json.dumps(what).encode()).hexdigest()[:8]
    # The script's or program's own name: train.py -> train, pkg.train -> pkg-train.
    entry = (worker.entry_name(spec).split() or [""])[0].rsplit("/", 1)[-1].removesuffix(".py")
    slug = re.sub(r"[^A-Za-z0-9]+", "-", entry).strip("-")[:40]
    return "-".join(part for part in (spec.name, slug, digest) if part)


def default_checkpoint_dir(spec: JobSpec, tenter_home: Path) -> Path:
    """``checkpoint.dir`` when the spec gives none: beside the job directories, one folder per
    job identity (:func:`job_identity`), so that running the same job again resumes it."""
    return jobs_root(spec, tenter_home) / layout.CHECKPOINTS_DIR / job_identity(spec)
