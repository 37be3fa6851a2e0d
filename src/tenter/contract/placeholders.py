"""The values a plan cannot know before launch, and the one place they are filled in.

A plan is a pure function of the spec (``tenter plan`` prints it, tests pin it), so what only
the launch can tell appears in it as a named placeholder, ``${name}``:

- ``${rdzv_port}``: the rendezvous store's port, a free port the launcher (or the first Slurm
  node) picks at start, never a fixed 29500, so that two jobs on one machine never clash;
- ``${master_port}``: the port of the workers' store (``MASTER_PORT``) where mpirun starts
  the ranks and the launcher serves it;
- ``${lighthouse_port}``: where torchft's lighthouse listens (``fault_tolerance``);
- ``${slurm_node_<i>}``, ``${slurm_nic}``: the address of the allocation's node ``i`` and the
  interface that carries a node's address, which only Slurm's allocation tells;
- ``${host}``, ``${host_index}``, ``${host_addr}``, ``${host_dir}``: the host a process runs
  on, in the environment and files every host shares (kept once in the plan, so that the plan
  grows with the hosts, not their square); :meth:`tenter.contract.plan.Plan.host_env` fills
  them in for each host.

:func:`resolve` fills them in, in one string or (:meth:`tenter.contract.plan.Plan.resolved`)
in a whole plan; nothing else in tenter substitutes text. A placeholder whose value is not
given stays as it is, for a later step that learns it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

RDZV_PORT = "${rdzv_port}"
MASTER_PORT = "${master_port}"
LIGHTHOUSE_PORT = "${lighthouse_port}"
SLURM_NIC = "${slurm_nic}"
HOST = "${host}"
HOST_INDEX = "${host_index}"
HOST_ADDR = "${host_addr}"
HOST_DIR = "${host_dir}"

_PLACEHOLDER = re.compile(r"\$\{[a-z0-9_]+\}")


def slurm_node(index: int) -> str:
    """The address of node ``index`` of the Slurm allocation."""
    return f"${{slurm_node_{index}}}"


def resolve(text: str, values: Mapping[str, object]) -> str:
    """``text`` with each placeholder that ``values`` names (placeholder -> value) replaced
    by its value, in one pass (a value is never itself resolved)."""
    return _PLACEHOLDER.sub(lambda m: str(values.get(m[0], m[0])), text)
