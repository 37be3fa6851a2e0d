"""The instance-type catalog: tenter's (``instance_types.yaml``), a user's catalog file of the
same schema for the types tenter lacks, and ``local`` (this machine).

The user's file is ``$TENTER_INSTANCE_TYPES``, else ``$TENTER_HOME/instance_types.yaml`` where
it exists; its entries add to tenter's, and replace tenter's entry of the same name. It is read
strictly: an unknown field, a wrong type or a bad name is bad input naming the file and field.
"""

from __future__ import annotations

import datetime
import difflib
import functools
import os
import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import psutil
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tenter.errors import TenterError

LOCAL_TYPES = ("local", "local_gpu")
USER_CATALOG_ENV = "TENTER_INSTANCE_TYPES"
"""The path of the user's catalog file (default: ``$TENTER_HOME/instance_types.yaml``)."""
USER_CATALOG_NAME = "instance_types.yaml"
_TYPE_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*\.[a-z0-9]+$")
"""``<family>.<size>`` as AWS spells it: ``g5.12xlarge``, ``p6-b200.48xlarge``."""


@dataclass(frozen=True)
class InstanceType:
    """What one host of a given type offers."""

    name: str
    gpus: int
    cpus: int
    memory_gib: float
    gpu_model: str | None = None
    gpu_memory_gib: float | None = None
    efa: int = 0
    gpu_rdma: bool = False
    neuron_cores: int = 0
    gpu_ids: tuple[str, ...] = ()
    """This machine's visible GPUs (``local`` types), as ``CUDA_VISIBLE_DEVICES`` names them."""

    @property
    def is_local(self) -> bool:
        return self.name in LOCAL_TYPES

    @property
    def sagemaker_name(self) -> str:
        """The name SageMaker shows in resourceconfig.json (``ml.`` prefixed)."""
        return self.name if self.is_local else f"ml.{self.name}"

    @property
    def family(self) -> str:
        """``g5`` of ``g5.12xlarge``."""
        return family(self.name)


class _Entry(BaseModel):
    """One type of a catalog file."""

    model_config = ConfigDict(extra="forbid", strict=True)

    gpus: int = Field(ge=0)
    cpus: int = Field(ge=1)
    memory_gib: float = Field(gt=0)
    gpu_model: str | None = None
    gpu_memory_gib: float | None = Field(default=None, gt=0)
    efa: int = Field(default=0, ge=0)
    gpu_rdma: bool = False
    neuron_cores: int = Field(default=0, ge=0)


class _CatalogFile(BaseModel):
    """A catalog file: where its figures come from, as of when, and its types."""

    model_config = ConfigDict(extra="forbid", strict=True)

    source: str = ""
    as_of: datetime.date | None = None
    types: dict[str, _Entry]


@dataclass(frozen=True)
class Catalog:
    types: dict[str, InstanceType]
    as_of: datetime.date | None


def family(name: str) -> str:
    """The family of a type name: ``g5`` of ``ml.g5.12xlarge``."""
    return canonical_name(name).split(".", 1)[0]


def _parse(text: str, where: str) -> Catalog:
    """A catalog file's types; bad input names ``where`` and the field."""
    fix = "see docs/spec.md, 'Instance types', for the schema"
    try:
        data = yaml.safe_load(text)
        parsed = _CatalogFile.model_validate(data)
    except yaml.YAMLError as e:
        raise TenterError(where, f"is not valid YAML: {e}", fix) from None
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        field = ".".join(str(part) for part in err["loc"]) or "the file"
        raise TenterError(where, f"{field}: {err['msg']} (got {err['input']!r})", fix) from None
    types = {}
    for name, entry in parsed.types.items():
        key = canonical_name(name)
        if not _TYPE_NAME.match(key):
            raise TenterError(
                where,
                f"types.{name}: not an instance type name",
                "name it <family>.<size> as AWS does (ml.g5.12xlarge or g5.12xlarge)",
            )
        types[key] = InstanceType(name=key, **entry.model_dump())
    return Catalog(types, parsed.as_of)


@functools.cache
def _builtin() -> Catalog:
    text = resources.files("tenter.spec").joinpath(USER_CATALOG_NAME).read_text()
    return _parse(text, "tenter's instance_types.yaml")


def user_catalog_path() -> Path | None:
    """The user's catalog file: ``$TENTER_INSTANCE_TYPES`` (which must exist), else
    ``$TENTER_HOME/instance_types.yaml`` where there is one."""
    named = os.environ.get(USER_CATALOG_ENV)
    if named:
        return Path(named)
    home = Path(os.environ.get("TENTER_HOME") or Path.home() / ".tenter")
    default = home / USER_CATALOG_NAME
    return default if default.is_file() else None


@functools.cache
def _user(path: Path, stamp: tuple[int, int]) -> dict[str, InstanceType]:
    """The types of the user's file at ``path`` (read again when ``stamp``, its modification
    time and size, changes)."""
    return _parse(path.read_text(), str(path)).types


def _catalog() -> dict[str, InstanceType]:
    path = user_catalog_path()
    if path is None:
        return _builtin().types
    try:
        stat = path.stat()
    except OSError as e:
        raise TenterError(
            USER_CATALOG_ENV,
            f"names {path}, which cannot be read ({e.strerror})",
            f"point it at your catalog file, or unset {USER_CATALOG_ENV}",
        ) from None
    return {**_builtin().types, **_user(path, (stat.st_mtime_ns, stat.st_size))}


def catalog_date() -> datetime.date | None:
    """When tenter's catalog was read from AWS's pages."""
    return _builtin().as_of


def canonical_name(name: str) -> str:
    """``ml.p4d.24xlarge`` and ``p4d.24xlarge`` are the same type."""
    return name.removeprefix("ml.")


def lookup(name: str) -> InstanceType | None:
    """The catalog entry for ``name``, or None if the type is unknown."""
    if name in LOCAL_TYPES:
        return detect_local(name)
    return _catalog().get(canonical_name(name))


def unknown_type(name: str) -> tuple[str, str]:
    """Why ``name`` is no type, and what is (a problem's what and fix): the closest type of its
    family first (a size that does not exist), then the closest spelling; the family's sizes,
    or every family."""
    types = _catalog()
    wanted = canonical_name(name)
    kin = [t for t in types if family(t) == family(wanted)]
    close = difflib.get_close_matches(wanted, kin, n=1, cutoff=0) if kin else []
    close = close or difflib.get_close_matches(wanted, types, n=1, cutoff=0.6)
    guess = f" Did you mean 'ml.{close[0]}'?" if close else ""
    if kin:
        known = f"ml.{family(wanted)} sizes: {', '.join(f'ml.{t}' for t in kin)}"
    else:
        families = ", ".join(dict.fromkeys(family(t) for t in types))
        known = f"families: {families}; or {' or '.join(LOCAL_TYPES)} (this machine)"
    added = f"; tenter's catalog is of {catalog_date()}" if catalog_date() else ""
    return (
        f"'{name}' is not in the catalog.{guess}",
        f"use a type of the catalog ({known}), or add one in $TENTER_HOME/{USER_CATALOG_NAME} "
        f"or ${USER_CATALOG_ENV} (docs/spec.md{added})",
    )


GPU_LISTING_ENV = "TENTER_NVIDIA_GPUS_DIR"
"""A test hook: a directory that stands in for the driver's ``/proc/driver/nvidia/gpus`` (one
entry per GPU), so that the GPU rules are tested on machines without GPUs."""


def _visible_gpus(proc_root: Path = Path("/proc")) -> tuple[str, ...]:
    """The GPUs the NVIDIA driver exposes, narrowed by CUDA_VISIBLE_DEVICES, as the ids a
    process's CUDA_VISIBLE_DEVICES names them by.

    Read from /proc rather than by importing torch: the CLI validates specs in
    well under a second, and importing torch costs more than that.
    """
    gpu_dir = Path(os.environ.get(GPU_LISTING_ENV) or proc_root / "driver" / "nvidia" / "gpus")
    count = len(list(gpu_dir.iterdir())) if gpu_dir.is_dir() else 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return tuple(str(i) for i in range(count))
    return tuple(d.strip() for d in visible.split(",") if d.strip())[:count]


def detect_local(name: str = "local") -> InstanceType:
    """This machine, described as an instance type."""
    gpu_ids = _visible_gpus()
    return InstanceType(
        name=name,
        gpus=len(gpu_ids),
        cpus=os.cpu_count() or 1,
        memory_gib=round(psutil.virtual_memory().total / 2**30, 1),
        gpu_ids=gpu_ids,
    )
