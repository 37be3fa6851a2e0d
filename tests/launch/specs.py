"""Job specs for the launch tests."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.conftest import SCRIPTS


def write_spec(tmp_path: Path, script: str, **fields: object) -> Path:
    """A job.yaml in ``tmp_path`` running ``script`` (from tests/launch/scripts) with ``fields``."""
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"entry_point": str(SCRIPTS / script), **fields}))
    return spec
