"""The upstream schemas every rendered Kubernetes object is validated against.

They live in ``<repo>/../shared/schemas`` (CI clones the repository with ``shared/`` beside
it): the CRDs of MPIJob, PyTorchJob and TrainJob and eksctl's ClusterConfig JSON schema.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.conftest import REPO

SCHEMAS = REPO.parent / "shared" / "schemas"
CRDS = {
    "PyTorchJob": "kubeflow.org_pytorchjobs.yaml",
    "MPIJob": "kubeflow.org_mpijobs.yaml",
    "TrainJob": "trainer.kubeflow.org_trainjobs.yaml",
}
EKSCTL = "eksctl.io_v1alpha5_clusterconfig.schema.json"


def _path(name: str) -> Path:
    path = SCHEMAS / name
    if not path.is_file():
        pytest.fail(
            f"{path} is missing: the Kubernetes tests validate against the upstream schemas in "
            "<repo>/../shared/schemas; clone the repository next to shared/ (see "
            "shared/schemas/README.md)"
        )
    return path


def strict(schema: Any) -> Any:
    """``schema`` with unknown fields refused, as ``kubectl apply`` (strict field validation)
    refuses them; the API server would otherwise drop a misspelled field without a word."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@functools.cache
def _validator(kind: str, api_version: str) -> jsonschema.protocols.Validator:
    if kind == "ClusterConfig":
        schema = json.loads(_path(EKSCTL).read_text())
        return jsonschema.Draft7Validator(schema)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(_path(CRDS[kind]).read_text(), Loader=loader)
    group, _, version = api_version.partition("/")
    assert crd["spec"]["group"] == group, (crd["spec"]["group"], api_version)
    [served] = [v for v in crd["spec"]["versions"] if v["name"] == version and v["served"]]
    return jsonschema.Draft7Validator(strict(served["schema"]["openAPIV3Schema"]))


def schema_errors(obj: dict[str, Any]) -> list[str]:
    """Every way ``obj`` breaks the upstream schema of its kind and apiVersion."""
    validator = _validator(obj["kind"], obj["apiVersion"])
    return sorted(
        f"{'.'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in validator.iter_errors(obj)
    )
