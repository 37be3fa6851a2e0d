"""The ray backend: one tenter agent per Ray node, placed by a placement group."""

from tenter.launch.backends.ray.backend import RayBackend

__all__ = ["RayBackend", "create_backend"]


def create_backend() -> RayBackend:
    return RayBackend()
