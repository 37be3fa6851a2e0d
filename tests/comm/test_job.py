"""The job spec picks the backend: SMDDP in ``distribution`` runs the job on tenter's, and
the local launcher's simulated hosts are separate hosts to it (the hierarchical path)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import assert_nothing_left, tenter

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "scripts" / "smddp_job.py"


def test_smdistributed_dataparallel_runs_the_job_on_the_tenter_backend(tmp_path: Path) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "smddp",
                "entry_point": SCRIPT.name,
                "source_dir": str(SCRIPT.parent),
                "instance_count": 2,
                "processes_per_host": 2,
                "distribution": {"smdistributed": {"dataparallel": {"enabled": True}}},
                "logs": {"ranks": [0, 1, 2, 3]},
            }
        )
    )
    done = tenter("run", "--no-live", str(spec))
    assert done.returncode == 0, done.stderr
    lines = sorted(
        line.split(": ", 1)[1] for line in done.stdout.splitlines() if "backend=" in line
    )
    assert lines == [f"rank {r}: backend=tenter hosts=2 freed=True" for r in range(4)], done.stdout
    assert_nothing_left(done.job_dir)
