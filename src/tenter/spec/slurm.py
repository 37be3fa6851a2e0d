"""``slurm``: where a job runs on a Slurm cluster (``backend: slurm``), as TorchX's Slurm
run options: every value becomes one ``#SBATCH`` line or ``srun`` flag of the batch script
(``tenter plan --backend slurm`` prints it).

slurm:
  partition: gpu
  account: ml-team
  qos: normal
  constraint: "h100&ib"        # --constraint: node features
  reservation: maint-window
  exclusive: true              # whole nodes, shared with no other job
  container_image: nvcr.io#nvidia/pytorch:24.05-py3   # pyxis/enroot, on the srun step
  container_mounts:
    - {source: /fsx, target: /fsx}
  extra_directives: ["--mail-type=END", "--comment=nightly"]
  network_interface: ens5      # default: the NIC of each node's NodeAddr, found on the node

Values are written into the batch script, so each is checked here for what could break out of
its line: a newline, a quote, a shell metacharacter. Only the rules of these values alone live
here; what depends on the rest of the spec (a directive tenter sets itself) is checked in
:mod:`tenter.spec.validate`.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, field_validator

from tenter.spec.base import StrictModel
from tenter.spec.errors import FieldError
from tenter.spec.mpirun import NicName

_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.,:/@%+=#\-]+$")
"""What a value in an ``#SBATCH`` line may hold: no space, quote, newline, ``$``, backquote,
``;``, ``|``, ``&``, ``<``, ``>``, parentheses or glob characters (sbatch reads the line
itself, and the same value is also an ``srun`` argument of the script's one shell command)."""
_UNSAFE_SHOWN = 40


def _safe(value: str) -> str:
    if not value:
        raise FieldError("is empty", "give a value or remove the field")
    if not _SAFE_VALUE.match(value):
        bad = sorted({c for c in value if not _SAFE_VALUE.match(c)})
        shown = ", ".join(repr(c) for c in bad)
        raise FieldError(
            f"{value[:_UNSAFE_SHOWN]!r} holds {shown}, which could break out of its #SBATCH line",
            "use letters, digits and _ . , : / @ % + = # -",
        )
    return value


SlurmValue = Annotated[str, AfterValidator(_safe)]
"""A value safe in an ``#SBATCH`` line and as a shell word."""

_DIRECTIVE = re.compile(r"^--[a-z][a-z0-9-]*(=.*)?$")
_CONSTRAINT = re.compile(r"^[A-Za-z0-9_.,:&|*\[\]\-]+$")
"""Slurm's feature expressions: names joined by ``&``, ``|``, ``,``; ``[a|b]``; ``name*N``."""


def _directive(value: str) -> str:
    if "\n" in value or "\r" in value:
        raise FieldError(f"{value!r} holds a newline", "give one directive per item")
    if not _DIRECTIVE.match(value):
        raise FieldError(
            f"{value[:_UNSAFE_SHOWN]!r} is not a long sbatch option",
            "write --name or --name=value (e.g. --mail-type=END)",
        )
    _, _, option_value = value.partition("=")
    if option_value:
        _safe(option_value)
    return value


SbatchDirective = Annotated[str, AfterValidator(_directive)]


class ContainerMount(StrictModel):
    """A folder of the node seen in the step's container (pyxis' ``--container-mounts``)."""

    source: SlurmValue
    """The folder on the node (absolute)."""
    target: SlurmValue
    """Where it appears in the container (absolute)."""
    read_only: bool = False

    @field_validator("source", "target")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise FieldError(f"'{value}' is not an absolute path", "give one, e.g. /fsx")
        if ":" in value or "," in value:
            raise FieldError(
                f"'{value}' holds ':' or ',', which separate pyxis' mount list",
                "use a folder whose path has neither",
            )
        return value

    def pyxis(self) -> str:
        return f"{self.source}:{self.target}" + (":ro" if self.read_only else "")


class SlurmOptions(StrictModel):
    partition: SlurmValue | None = None
    """``--partition``: the partition the job is queued in (default: the cluster's)."""
    account: SlurmValue | None = None
    """``--account``: the account charged (most clusters refuse a job without one)."""
    qos: SlurmValue | None = None
    """``--qos``: the quality of service."""
    constraint: str | None = Field(default=None, pattern=_CONSTRAINT.pattern, max_length=1024)
    """``--constraint``: node features the nodes must have (``h100&ib``, ``[rack1|rack2]``)."""
    reservation: SlurmValue | None = None
    """``--reservation``: run in this reservation."""
    exclusive: bool = False
    """``--exclusive``: whole nodes, shared with no other job."""
    container_image: SlurmValue | None = None
    """pyxis' ``--container-image`` on the ``srun`` step (an enroot image: a registry
    reference or a ``.sqsh`` file); the image must have torch and tenter."""
    container_mounts: list[ContainerMount] = Field(default_factory=list)
    """pyxis' ``--container-mounts``, besides the job directory and ``source_dir``, which tenter
    mounts at their own paths (the agents read the plan there, the ranks write logs)."""
    container_python: SlurmValue = "python3"
    """The container's Python (with ``container_image``)."""
    network_interface: NicName | None = None
    """The nodes' network interface for the ranks' sockets (``GLOO_SOCKET_IFNAME``,
    ``NCCL_SOCKET_IFNAME``). Default: on each node, the interface that carries its
    ``NodeAddr`` (what ``scontrol show node`` says), found when the job starts there."""
    extra_directives: list[SbatchDirective] = Field(default_factory=list, max_length=64)
    """More ``#SBATCH`` lines, each a long option (``--mail-type=END``); not those tenter sets
    itself or those above."""
