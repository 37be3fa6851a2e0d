"""Secrets by reference: ``secrets: [HF_TOKEN]`` names variables whose values the job takes
from the environment it is submitted from, never from the spec, so that no value is written
into the plan, a script, a manifest or a command line (docs/security.md).

On Kubernetes a secret names a Secret of the cluster instead (``secrets: {HF_TOKEN: {secret:
hf, key: token}}``), which the pods read through ``secretKeyRef``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from pydantic import Field

from tenter.spec.base import StrictModel
from tenter.spec.errors import Problem
from tenter.spec.kubernetes import DNS1123_SUBDOMAIN
from tenter.spec.limits import key_path


class SecretKeyRef(StrictModel):
    """A key of a Kubernetes Secret in the job's namespace."""

    secret: str = Field(pattern=DNS1123_SUBDOMAIN, max_length=253)
    """The Secret's name."""
    key: str = Field(pattern=r"^[-._a-zA-Z0-9]+$", max_length=253)
    """The key in it whose value the variable gets."""


Secrets = list[str] | dict[str, SecretKeyRef]
"""Variable names taken from the submitting environment, or (Kubernetes) variable -> Secret key."""

VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
"""What may name a variable (SageMaker's rule; '=' would split it, and job scripts export it)."""
_CREDENTIAL = re.compile(r"(_TOKEN|_KEY)$|SECRET|PASSWORD|PASSWD", re.IGNORECASE)
"""Names that usually hold a credential (``HF_TOKEN``, ``AWS_SECRET_ACCESS_KEY``...)."""


def looks_like_credential(name: str) -> bool:
    return bool(_CREDENTIAL.search(name))


def credential_warnings(environment: Mapping[str, str]) -> list[Problem]:
    """A warning for each plain ``environment`` value whose name looks like a credential: it
    is written in clear into the plan, ``tenter plan``'s output and manifests."""
    return [
        Problem(
            key_path("environment", name),
            "looks like a credential, and an environment value is written in clear into the "
            "plan, `tenter plan`'s output, scripts and manifests",
            f"list it under secrets (secrets: [{name}], or --secret {name}) and export it "
            "where you run tenter",
        )
        for name in environment
        if looks_like_credential(name)
    ]


def secret_problems(
    secrets: Secrets, environment: Mapping[str, str], backend: str
) -> list[Problem]:
    """The errors of ``secrets``: a name that is no variable name or that ``environment``
    sets too, and the form the backend cannot take."""
    out = []
    on_kubernetes = backend == "kubernetes"
    if secrets and isinstance(secrets, list) == on_kubernetes:
        fix = (
            "name a Secret of the cluster: secrets: {NAME: {secret: SECRET, key: KEY}}"
            if on_kubernetes
            else "list the variable names (secrets: [NAME]); they are taken from the "
            "environment tenter runs in"
        )
        out.append(Problem("secrets", f"this form is not for backend {backend}", fix))
    for i, name in enumerate(secrets):
        path = key_path("secrets", name)
        if name in list(secrets)[:i]:
            out.append(Problem(path, f"{name} is named twice", "name it once"))
        elif not VARIABLE_NAME.match(name):
            out.append(
                Problem(path, f"'{name}' is not a variable name", "use letters, digits and '_'")
            )
        elif name in environment:
            out.append(
                Problem(path, f"{name} is also set in environment", "remove it from environment")
            )
    return out


def missing_secrets(names: Iterable[str], environ: Mapping[str, str]) -> list[Problem]:
    """The secrets the submitting environment ``environ`` lacks: the job would start without
    them, so nothing is launched."""
    return [
        Problem(
            key_path("secrets", name),
            f"{name} is not set in the environment tenter runs in",
            f"export {name}=... before running, or remove it from secrets",
        )
        for name in names
        if name not in environ
    ]
