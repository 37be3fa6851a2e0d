"""The launch backends a spec may name: a module of its own, so that the backend registry
(:mod:`tenter.launch.api`) knows them without importing the spec's models."""

KNOWN_BACKENDS = ("local", "mpi", "slurm", "kubernetes", "ray")
"""Launch backends this version can run."""
ISOLATING_BACKENDS = ("local", "mpi")
"""Backends that can run a job on isolated hosts (``isolation: network``)."""
