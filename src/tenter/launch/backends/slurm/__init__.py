"""The slurm backend: ``sbatch`` submits the job; one tenter agent per node runs it."""

from tenter.launch.backends.slurm.backend import SlurmBackend

__all__ = ["SlurmBackend", "create_backend"]


def create_backend() -> SlurmBackend:
    return SlurmBackend()
