"""``tenter data imagenet-val-reorg VAL_DIR LOC_val_solution.csv [--dry-run]``: move the flat
ImageNet validation images into one folder per class, the layout ``ImageFolder`` reads.

Idempotent (a second run moves nothing); refuses, moving nothing, when the folder and the CSV
disagree. See :mod:`tenter.data.imagenet`.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.markup import escape

from tenter.cli.parsing import EXIT_USAGE, stderr

SHOWN_MOVES = 10


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "data", help="prepare datasets (ImageNet validation set re-organisation)"
    )
    data = parser.add_subparsers(dest="data_command", metavar="TASK", required=True)
    reorg = data.add_parser(
        "imagenet-val-reorg",
        help="move ImageNet's flat validation images into per-class folders",
        description="Move VAL_DIR/ILSVRC2012_val_*.JPEG into VAL_DIR/<synset>/ as listed in "
        "LOC_val_solution.csv, so that torchvision's ImageFolder reads the validation set.",
    )
    reorg.add_argument("val_dir", metavar="VAL_DIR", help="the flat validation image folder")
    reorg.add_argument("csv", metavar="CSV", help="LOC_val_solution.csv (ImageId,PredictionString)")
    reorg.add_argument(
        "--dry-run", action="store_true", help="say what would be moved, move nothing"
    )
    reorg.set_defaults(func=imagenet_val_reorg)


def imagenet_val_reorg(args: argparse.Namespace) -> int:
    from tenter.data import imagenet

    try:
        labels = imagenet.read_solution(Path(args.csv))
        plan = imagenet.plan_reorg(Path(args.val_dir), labels, Path(args.csv))
    except imagenet.ReorgError as e:
        stderr.print(f"[bold red]error:[/] {escape(str(e))}")
        return EXIT_USAGE
    if args.dry_run:
        for src, dst in plan.moves[:SHOWN_MOVES]:
            print(f"would move {src} -> {dst}")
        if len(plan.moves) > SHOWN_MOVES:
            print(f"... and {len(plan.moves) - SHOWN_MOVES} more")
    else:
        imagenet.apply(plan)
    verb = "would move" if args.dry_run else "moved"
    print(
        f"{verb} {len(plan.moves)} images into {len(plan.classes)} class folders "
        f"({plan.in_place} already in place)"
    )
    return 0
