"""The GPUs Ray gave a host's actor, for the host's agent log: its bundle asks for the host's
GPUs in the plan (``tenter plan --backend ray`` shows them, in ``ray.json``'s bundles), and
the ranks see the plan's ``CUDA_VISIBLE_DEVICES``, in the plan's order (Ray hands the same
GPUs out in an order of its own)."""

from __future__ import annotations


def assigned_gpus_line() -> bytes:
    """``ray: this host's actor has GPUs 0,1`` (sorted as numbers where they are), or none."""
    import ray

    ids = sorted(ray.get_gpu_ids(), key=lambda i: (len(str(i)), str(i)))
    return f"ray: this host's actor has GPUs {','.join(map(str, ids)) or '(none)'}\n".encode()
