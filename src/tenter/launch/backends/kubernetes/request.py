"""The request of the kubernetes backend: the exact objects ``submit`` creates."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tenter.launch.backends.kubernetes.manifests import Manifest


def to_yaml(objects: Iterable[Manifest]) -> str:
    # width: a long command stays on one line instead of YAML's folded continuation.
    return yaml.safe_dump_all(list(objects), sort_keys=False, width=10_000)


@dataclass(frozen=True)
class KubernetesRequest:
    """The exact objects ``submit`` creates; ``str()`` is their YAML."""

    job_id: str
    kind: str
    namespace: str
    context: str | None
    objects: list[Manifest]
    hosts: int
    procs_per_host: int
    job_dir: str
    """Where this machine keeps the job's request, handle and summary."""
    log_pods: list[str] | None = None
    """Pods whose output the console shows (None: every pod of the job)."""
    rank_pods: list[str] | None = None
    """A PyTorchJob's pods in node-rank order (host i holds ranks i*procs_per_host...)."""
    backend: str = "kubernetes"

    @property
    def plan(self) -> None:
        """No plan of tenter's agents: the pods run torchrun in their image."""
        return None

    def materialize(self) -> list[Manifest]:
        return copy.deepcopy(self.objects)

    def __str__(self) -> str:
        return to_yaml(self.objects)

    def to_json(self) -> str:
        return json.dumps(self.objects, indent=2)

    def record(self) -> str:
        """The whole request, as the job directory keeps it."""
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_record(cls, text: str) -> KubernetesRequest:
        data: dict[str, Any] = json.loads(text)
        return cls(**data)

    def write(self, folder: Path) -> list[Path]:
        """One ``<kind>-<name>.yaml`` per object in ``folder`` (for ``kubectl apply -f``)."""
        folder.mkdir(parents=True, exist_ok=True)
        paths = []
        for obj in self.objects:
            path = folder / f"{obj['kind'].lower()}-{obj['metadata']['name']}.yaml"
            path.write_text(to_yaml([obj]))
            paths.append(path)
        return paths
