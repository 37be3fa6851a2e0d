"""The mpi backend: Open MPI's ``mpirun`` starts every rank."""

from tenter.launch.backends.mpi.backend import MpiBackend

__all__ = ["MpiBackend", "create_backend"]


def create_backend() -> MpiBackend:
    return MpiBackend()
