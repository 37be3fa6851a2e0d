"""ImageNet's validation set as an ``ImageFolder`` tree: ``tenter data imagenet-val-reorg``.

The ILSVRC2012 validation images come flat (``val/ILSVRC2012_val_00000001.JPEG`` ...) with
their labels in a CSV (Kaggle's ``LOC_val_solution.csv``)::

    ImageId,PredictionString
    ILSVRC2012_val_00008726,n02119789 255 142 454 329 n02119789 44 21 322 295

The prediction string is boxes of ``synset x_min y_min x_max y_max``, all of the image's one
class. :func:`plan_reorg` works out which image goes to which class folder
(``val/n02119789/ILSVRC2012_val_00008726.JPEG``), and refuses, moving nothing, if the folder
and the CSV disagree: an image listed but absent, an image present but not listed, an image in
another class's folder. :func:`apply` moves the images (a rename: same file system, nothing
copied). Running it again finds everything in place and moves nothing.
"""

from __future__ import annotations

import csv
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

HEADER = ["ImageId", "PredictionString"]
SUFFIX = ".JPEG"
SYNSET = re.compile(r"n\d{8}")
EXAMPLES = 5
"""How many of each kind of problem an error message names."""


class ReorgError(ValueError):
    """The validation folder or the CSV is not what the re-organisation expects."""


@dataclass
class ReorgPlan:
    val_dir: Path
    moves: list[tuple[Path, Path]] = field(default_factory=list)
    in_place: int = 0
    classes: set[str] = field(default_factory=set)


def read_solution(csv_path: Path) -> dict[str, str]:
    """Image id -> synset, from ``LOC_val_solution.csv``."""
    labels: dict[str, str] = {}
    try:
        with open(csv_path, newline="") as fp:
            rows = csv.reader(fp)
            header = next(rows, None)
            if header != HEADER:
                raise ReorgError(
                    f"{csv_path}: the first line is {','.join(header or [])!r}, not "
                    f"{','.join(HEADER)!r}; give ImageNet's LOC_val_solution.csv"
                )
            for line, row in enumerate(rows, start=2):
                words = row[1].split() if len(row) == 2 else []
                if not words or not SYNSET.fullmatch(words[0]) or not row[0]:
                    raise ReorgError(
                        f"{csv_path}, line {line}: {','.join(row)!r} is not "
                        "'ImageId,<synset> <x_min> <y_min> <x_max> <y_max> ...' "
                        "(e.g. ILSVRC2012_val_00008726,n02119789 255 142 454 329)"
                    )
                if row[0] in labels:
                    raise ReorgError(f"{csv_path}, line {line}: {row[0]} is listed twice")
                labels[row[0]] = words[0]
    except FileNotFoundError:
        raise ReorgError(f"no CSV file {csv_path}; give the path of LOC_val_solution.csv") from None
    if not labels:
        raise ReorgError(f"{csv_path} lists no image")
    return labels


def _some(names: list[str]) -> str:
    shown = ", ".join(sorted(names)[:EXAMPLES])
    return shown + (f" and {len(names) - EXAMPLES} more" if len(names) > EXAMPLES else "")


def plan_reorg(val_dir: Path, labels: dict[str, str], csv_path: Path | None = None) -> ReorgPlan:
    """The moves that put every listed image into its class folder; raises
    :class:`ReorgError` naming the missing, unlisted and misplaced images, if any."""
    if not val_dir.is_dir():
        raise ReorgError(f"no directory {val_dir}; give ImageNet's validation image folder")
    flat: set[str] = set()
    placed: dict[str, str] = {}  # image id -> the class folder it is in
    extra: list[str] = []
    for entry in os.scandir(val_dir):
        if entry.is_dir() and SYNSET.fullmatch(entry.name):
            for image in os.scandir(entry.path):
                image_id = image.name.removesuffix(SUFFIX)
                if image_id in labels:
                    placed[image_id] = entry.name
                else:
                    extra.append(f"{entry.name}/{image.name}")
        elif entry.is_file() and not (csv_path and os.path.samefile(entry.path, csv_path)):
            image_id = entry.name.removesuffix(SUFFIX)
            if entry.name.endswith(SUFFIX) and image_id in labels:
                flat.add(image_id)
            else:
                extra.append(entry.name)
    missing = [i for i in labels if i not in flat and i not in placed]
    misplaced = [
        f"{c}/{i}{SUFFIX} (belongs in {labels[i]})" for i, c in placed.items() if c != labels[i]
    ]
    problems = []
    if missing:
        problems.append(f"{len(missing)} images listed in the CSV are not there: {_some(missing)}")
    if extra:
        problems.append(f"{len(extra)} files are not listed in the CSV: {_some(extra)}")
    if misplaced:
        problems.append(
            f"{len(misplaced)} images are in another class's folder: {_some(misplaced)}"
        )
    if problems:
        raise ReorgError(
            f"{val_dir} does not match the CSV, nothing was moved:\n"
            + "\n".join(f"  - {p}" for p in problems)
            + "\n  Use the complete ILSVRC2012 validation folder (50,000 images) with its "
            "LOC_val_solution.csv, and remove or move away any other file."
        )
    plan = ReorgPlan(val_dir, classes=set(labels.values()))
    for image_id in sorted(flat):
        name = image_id + SUFFIX
        plan.moves.append((val_dir / name, val_dir / labels[image_id] / name))
    plan.in_place = len(placed)
    return plan


def apply(plan: ReorgPlan) -> None:
    for synset in sorted(plan.classes):
        (plan.val_dir / synset).mkdir(exist_ok=True)
    for src, dst in plan.moves:
        os.replace(src, dst)
