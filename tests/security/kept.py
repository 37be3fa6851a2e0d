"""The secret a test job is given, and where it must not be: for the security suite and the
backends' tests that run a job with it (tests/launch/test_slurm.py)."""

from __future__ import annotations

import contextlib
import hashlib
import re
import secrets
from pathlib import Path

SECRET = f"hf_{secrets.token_hex(16)}"
"""The secret the job is given: random, so that no file can hold it by chance."""
RANK = Path(__file__).with_name("rank.py")
"""The rank script: says the hash of its ``HF_TOKEN``, then waits for ``RELEASE_FILE``."""


def every_cmdline() -> list[str]:
    """The command line of every process of this machine, as ``ps`` shows it."""
    out = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                out.append((proc / "cmdline").read_bytes().decode(errors="replace"))
    return out


def assert_kept_yet_every_rank_has_it(
    job_dir: Path, console: str, cmdlines: list[str], world: int
) -> None:
    """The secret is in no file under ``job_dir``, not in ``console`` nor in any of
    ``cmdlines``; each of the ``world`` ranks said the hash of the value it got."""
    files = [p for p in job_dir.rglob("*") if p.is_file() and not p.is_symlink()]
    assert len(files) > 10  # plan, events, summary, logs...
    assert [p for p in files if SECRET.encode() in p.read_bytes()] == []
    assert SECRET not in console
    assert [c for c in cmdlines if SECRET in c] == []
    digest = hashlib.sha256(SECRET.encode()).hexdigest()
    seen = re.findall(r"secret-sha256 (\d+) (\w+)", console)
    assert sorted(seen) == [(str(r), digest) for r in range(world)]
