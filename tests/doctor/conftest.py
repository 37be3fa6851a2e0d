"""Fake hosts for the doctor: ``fixtures/<host>/root`` is the file tree the checks read, and
``fixtures/<host>/host.yaml`` holds what no file does (environment, torch's build, network)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tenter.doctor.system import Interface, System, TorchBuild

FIXTURES = Path(__file__).parent / "fixtures"


def fake_host(name: str, **env: str | None) -> System:
    """The fixture host ``name``; ``env`` sets (or with None removes) variables."""
    spec: dict[str, Any] = yaml.safe_load((FIXTURES / name / "host.yaml").read_text())
    environment = {**spec["env"], **env}
    resolve_map: dict[str, list[str]] = spec.get("resolve", {})
    return System(
        FIXTURES / name / "root",
        {k: v for k, v in environment.items() if v is not None},
        torch=TorchBuild(**{k: str(v) for k, v in spec["torch"].items()}),
        interfaces=[Interface(i["name"], i["up"], tuple(i["ipv4"])) for i in spec["interfaces"]],
        hostname=spec["hostname"],
        resolve=lambda host: resolve_map.get(host, []),
        python_path=spec.get("python_path", []),
    )


@pytest.fixture
def host() -> Callable[..., System]:
    return fake_host
