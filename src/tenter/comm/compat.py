"""What differs between the torch versions ``tenter.comm`` runs on, and every private torch
name it uses.

Kept in one place so that the backend reads as if there were one torch, and dropping an
old version means deleting lines here. A tag ``[torch A-B]`` or ``[torch A+]`` says which
versions a line serves (no tag: every supported one, 2.7 to 2.15); the API check
(tests/torch_versions) checks each line against those versions.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllgatherOptions  # no public name

__all__ = ["AllgatherOptions"]

# torch's stubs type the Python-facing overloads of these classes, not the C++ virtuals a
# subclass overrides (different names and arguments), so the bases are taken untyped.
WorkBase: Any = dist.Work
ProcessGroupBase: Any = dist.ProcessGroup

TRAMPOLINE_OWNS_WORK = torch.__version__ >= "2.13"  # [torch 2.13+]
"""Before torch 2.13 the C++ trampoline does not keep alive the Python ``Work`` it hands
to C++ callers (DDP's reducer), so the backend must hold on to it until C++ has asked."""

OLD_METHOD_NAMES: dict[str, str] = {
    "_allgather_base": "all_gather_single",  # [torch 2.7]
    "allgather_into_tensor_coalesced": "all_gather_single_coalesced",  # [torch 2.7]
    "_reduce_scatter_base": "reduce_scatter_single",  # [torch 2.7]
    "reduce_scatter_tensor_coalesced": "reduce_scatter_single_coalesced",  # [torch 2.7]
    "alltoall_base": "all_to_all_single",  # [torch 2.7]
}
"""ProcessGroup methods torch 2.8 renamed: the name before 2.8 -> the name since."""

_Class = TypeVar("_Class", bound=type)


def add_old_method_names(cls: _Class) -> _Class:
    """Give ``cls`` the pre-2.8 names of its methods, so every torch finds them."""
    for old, new in OLD_METHOD_NAMES.items():
        setattr(cls, old, getattr(cls, new))
    return cls


def method_names(name: str) -> tuple[str, ...]:
    """``name`` and its pre-2.8 spellings, newest first: what to look up on a backend
    (NCCL) that has only the names of the torch it came with."""
    return (name, *(old for old, new in OLD_METHOD_NAMES.items() if new == name))


def call_by_any_name(backend: Any, names: Sequence[str], *args: Any) -> Any:
    """Call the first of ``names`` that ``backend`` has."""
    for name in names:
        method = getattr(backend, name, None)
        if method is not None:
            return method(*args)
    raise ValueError(f"tenter.comm: this torch's {type(backend).__name__} has no {names[0]}.")


def gloo_options(timeout: timedelta, hostname: str) -> Any:
    """Options for a ``ProcessGroupGloo`` whose one device binds ``hostname``."""
    opts = getattr(dist.ProcessGroupGloo, "_Options")()  # noqa: B009  # not in the stubs
    opts._timeout = timeout
    opts._devices = [dist.ProcessGroupGloo.create_device(hostname=hostname)]
    return opts


def set_nccl_timeout(opts: Any, timeout: timedelta) -> None:
    """Set the timeout of ``dist.ProcessGroupNCCL.Options``."""
    opts._timeout = timeout


def gloo_all_gather_into(gloo: Any, output: torch.Tensor, inp: torch.Tensor) -> Any:
    """gloo's all-gather into one flat tensor (``ProcessGroupGloo`` keeps the old name)."""
    return gloo._allgather_base(output, inp, AllgatherOptions())


def use_backend_for_cpu(group: Any, backend: Any) -> None:
    """Register ``backend`` as ``group``'s C++ backend for CPU tensors."""
    group._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.CUSTOM, backend)
