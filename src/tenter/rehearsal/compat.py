"""Where ``tenter.rehearsal`` reaches into torch beyond calling its public API: the one patch
it makes, to count the store requests of a pack's agents (:mod:`tenter.rehearsal.store_count`).

Kept in one place, as every package's ``compat.py``. A tag ``[torch A-B]`` or ``[torch A+]``
says which versions a line serves (no tag: every supported one, 2.7 to 2.15).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

STORE_REQUESTS = (
    "add", "append", "check", "compare_set", "delete_key", "get", "multi_get", "multi_set",
    "num_keys", "set", "wait",
)  # fmt: skip
"""The public request methods of torch's ``Store``, which ``TCPStore`` and ``PrefixStore``
inherit and which the agents, torch's rendezvous handler and tenter's in-round restart call
from Python."""


def wrap_store_requests(wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
    """Replace each request method of ``torch.distributed.Store`` with
    ``wrap(method)``, in this process: torch has no hook on a store's requests."""
    import torch.distributed as dist

    for name in STORE_REQUESTS:
        setattr(dist.Store, name, wrap(getattr(dist.Store, name)))
