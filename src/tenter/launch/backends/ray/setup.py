"""What a Ray job asks of its cluster, as the plan shows it (``ray.json`` among the plan's
files): the cluster's address or the ``ray start`` commands of a local one, and the placement
group, one bundle per host, spread over distinct nodes."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tenter.launch.backends.ray.cluster import host_resource, node_commands

if TYPE_CHECKING:
    from tenter.spec import JobSpec

SETUP_FILE = "ray.json"
STRATEGY = "STRICT_SPREAD"
"""Each bundle on a node of its own, as each host is a machine of its own elsewhere."""


@dataclass(frozen=True)
class RaySetup:
    address: str | None
    """A running cluster's GCS; None: the local cluster of ``nodes``."""
    nodes: list[list[str]]
    bundles: list[dict[str, float]]
    strategy: str
    name: str
    runtime_env: dict[str, object]
    """Ray's runtime environment of the hosts' actors (the spec's ``ray.runtime_env``)."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> RaySetup:
        return cls(**json.loads(text))


def ray_setup(spec: JobSpec, host_gpus: list[list[str]], job_id: str, python: str) -> RaySetup:
    """``host_gpus[i]``: host ``i``'s GPUs in the plan, which its bundle asks for."""
    ray_bin = str(Path(python).parent / "ray")  # the ray of the Python that runs the agents
    local = spec.ray.address is None
    return RaySetup(
        address=spec.ray.address,
        nodes=node_commands(host_gpus, ray_bin) if local else [],
        # A local cluster pins host i to node i; on a given cluster, any distinct nodes do.
        bundles=[
            {
                **spec.ray.resources_per_host,
                **({"GPU": len(gpus)} if gpus else {}),
                **({host_resource(i): 1} if local else {}),
            }
            or {"CPU": 1}
            for i, gpus in enumerate(host_gpus)
        ],
        strategy=STRATEGY,
        name=spec.ray.job_name or job_id,
        runtime_env=spec.ray.runtime_env.model_dump(exclude_defaults=True),
    )
