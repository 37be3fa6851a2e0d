"""Errors raised by :mod:`tenter.checkpoint`, and what a checkpoint that does not fit the
model is told (:func:`check_model_fits`)."""

from __future__ import annotations

from pathlib import Path


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


def check_model_fits(
    path: Path, saved: dict[str, tuple[int, ...]], model: dict[str, tuple[int, ...]]
) -> None:
    """Raise :class:`CheckpointMismatchError` naming every key that is missing from the
    checkpoint, unexpected in it, or of another shape."""
    missing = sorted(model.keys() - saved.keys())
    unexpected = sorted(saved.keys() - model.keys())
    shapes = {k: (saved[k], model[k]) for k in sorted(saved.keys() & model.keys())}
    shapes = {k: pair for k, pair in shapes.items() if pair[0] != pair[1]}
    if not (missing or unexpected or shapes):
        return
    lines = [f"checkpoint {path} does not fit the model:"]
    if missing:
        lines.append(f"  missing in the checkpoint: {_listing(missing)}")
    if unexpected:
        lines.append(f"  unexpected in the checkpoint: {_listing(unexpected)}")
    if shapes:
        described = [
            f"{k} (checkpoint {_shape(c)}, model {_shape(m)})" for k, (c, m) in shapes.items()
        ]
        lines.append(f"  different shapes: {_listing(described)}")
    lines.append("Resume with the model the checkpoint was saved from, or use a new dir.")
    raise CheckpointMismatchError("\n".join(lines), missing, unexpected, shapes)


def _listing(items: list[str], limit: int = 10) -> str:
    shown = ", ".join(items[:limit])
    return shown if len(items) <= limit else f"{shown}, ... ({len(items) - limit} more)"


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"
