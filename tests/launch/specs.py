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


def joinable_spec(tmp_path: Path, **fields: object) -> Path:
    """A job of 1 host that finishes only once a second host joined (``tenter join``)."""
    return write_spec(
        tmp_path,
        "elastic.py",
        instance_count=1,
        processes_per_host=1,
        environment={"TARGET_WORLD": "2"},
        elastic={
            "min_hosts": 1,
            "max_hosts": 2,
            "max_restarts": 1,
            "rendezvous": {"last_call_timeout": 1},
        },
        **fields,
    )


def lost_host_spec(tmp_path: Path) -> Path:
    """A job of 2 hosts that finishes only once it went on with 1 (a host lost). Its last call
    is long so that the first round has both hosts whenever the second comes (a round of 2
    closes as soon as both are in): with 1 s, a second agent more than a second late on a
    loaded machine made a first round of 1 host, which finished at once."""
    return write_spec(
        tmp_path,
        "elastic.py",
        instance_count=2,
        processes_per_host=1,
        environment={"TARGET_WORLD": "1"},
        elastic={"min_hosts": 1, "max_restarts": 2, "rendezvous": {"last_call_timeout": 30}},
    )
