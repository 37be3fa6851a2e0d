"""Errors raised by :mod:`tenter.checkpoint`."""

from __future__ import annotations


class CheckpointError(RuntimeError):
    """Base class of every error of :mod:`tenter.checkpoint`: an unusable checkpoint
    directory, a failed save, or a checkpoint that cannot be loaded."""


class CheckpointMismatchError(CheckpointError):
    """The checkpoint was saved from a model of another shape.

    ``missing`` holds the keys the model has and the checkpoint lacks, ``unexpected`` the
    keys the checkpoint has and the model lacks, ``shapes`` maps each key whose shape
    differs to ``(checkpoint shape, model shape)``.
    """

    def __init__(
        self,
        message: str,
        missing: list[str],
        unexpected: list[str],
        shapes: dict[str, tuple[tuple[int, ...], tuple[int, ...]]],
    ) -> None:
        super().__init__(message)
        self.missing = missing
        self.unexpected = unexpected
        self.shapes = shapes
