"""The embedded default backend: ``instance_count`` simulated hosts on this machine."""

from tenter.launch.backends.local.backend import LocalBackend

__all__ = ["LocalBackend", "create_backend"]


def create_backend() -> LocalBackend:
    return LocalBackend()
