"""``mpirun``: what real hosts need of the mpi backend (``backend: mpi``).

mpirun:
  hostfile: hosts.txt          # Open MPI's hostfile: the job's hosts are its first N
  network_interface: ens5      # the hosts' NIC (default eth0, SageMaker's name)
  mca:                         # more MCA parameters, over tenter's defaults
    btl_tcp_if_include: ens5
    plm_rsh_args: "-p 2222"

``distribution.mpi.custom_mpi_options`` (SageMaker's string) still works; ``mca`` is the same
as typed data, and a parameter set in both places is refused. Only the rules of these values
alone live here; what depends on the rest of the spec is checked in
:mod:`tenter.spec.validate`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field, field_validator

from tenter.spec.base import StrictModel
from tenter.spec.errors import FieldError

_MCA_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
_NIC_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,14}$")


def _nic(value: str) -> str:
    if not _NIC_NAME.match(value):
        raise FieldError(
            f"{value[:40]!r} is not a network interface name",
            "give 1 to 15 letters, digits and _ . : - (e.g. eth0, ens5; `ip -br addr` on a host "
            "lists them)",
        )
    return value


NicName = Annotated[str, AfterValidator(_nic)]
"""A Linux network interface's name."""
MAX_HOSTFILE_BYTES = 1 << 20
"""A hostfile longer than this is no hostfile (and is not read whole)."""


class MpirunOptions(StrictModel):
    hostfile: str | None = None
    """Open MPI's hostfile (``host slots=N`` per line; relative to the spec file). The job's
    hosts are its first ``instance_count`` hosts, in order; mpirun gets it as ``--hostfile``."""
    network_interface: NicName | None = None
    """The hosts' network interface: mpirun's TCP (``btl_tcp_if_include``,
    ``oob_tcp_if_include``) and the ranks' sockets (``GLOO_SOCKET_IFNAME``,
    ``NCCL_SOCKET_IFNAME``). Default ``eth0``, SageMaker's name; real hosts' often differ
    (``ens5``, ``enp71s0``: ``ip -br addr`` on a host tells)."""
    mca: dict[str, str] = Field(default_factory=dict, max_length=256)
    """Extra MCA parameters (``--mca NAME VALUE``); a value replaces tenter's default."""

    @field_validator("mca")
    @classmethod
    def _mca(cls, value: dict[str, str]) -> dict[str, str]:
        for name, setting in value.items():
            if not _MCA_NAME.match(name):
                raise FieldError(
                    f"'{name}' is not an MCA parameter name",
                    "use lower-case letters, digits and '_' (e.g. btl_tcp_if_include)",
                )
            if not setting or any(not c.isprintable() for c in setting):
                raise FieldError(
                    f"{name}: {setting!r} is empty or not printable",
                    "give non-empty printable text",
                )
        return value


def hostfile_hosts(path: Path) -> list[str]:
    """The host names of an Open MPI hostfile, in order (comments and blank lines skipped).
    Raises ValueError saying what is wrong with the file."""
    try:
        with path.open("rb") as f:
            data = f.read(MAX_HOSTFILE_BYTES + 1)
    except OSError as e:
        raise FieldError(
            f"'{path}' cannot be read: {e.strerror}", "give a readable hostfile"
        ) from None
    if len(data) > MAX_HOSTFILE_BYTES:
        raise FieldError(
            f"'{path}' is over {MAX_HOSTFILE_BYTES >> 20} MiB: not a hostfile",
            "give Open MPI's hostfile ('HOST slots=N' per line)",
        )
    hosts = []
    for number, raw in enumerate(data.decode(errors="replace").splitlines(), 1):
        line = raw.partition("#")[0].split()
        if not line:
            continue
        name = line[0]
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.\-]*", name) or any(
            not re.fullmatch(r"(slots|max_slots|max-slots)=[0-9]+", word) for word in line[1:]
        ):
            raise FieldError(
                f"'{path}' line {number}: {raw.strip()[:80]!r} is not 'HOST [slots=N]'",
                "write one host per line, with slots=N if it runs several ranks",
            )
        if name not in hosts:
            hosts.append(name)
    return hosts
