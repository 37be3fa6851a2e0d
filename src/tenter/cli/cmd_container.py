"""``tenter container dockerfile``: write the Dockerfile of an EFA training image.

    tenter container dockerfile                          # newest known torch, to stdout
    tenter container dockerfile --torch 2.5 --cuda 12.4 --with-nccl-tests -o Dockerfile

Versions come from tenter/container/versions.yaml; an unknown torch or torch/CUDA pair is an
error (exit 2) that lists the known ones.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from rich.markup import escape

from tenter.cli.parsing import stderr
from tenter.container import RecipeError, render, resolve

EXIT_USAGE = 2


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "container",
        help="container recipes (the EFA training image)",
        description="Container recipes for training on EFA instances.",
    )
    recipes = parser.add_subparsers(dest="recipe", metavar="RECIPE", required=True)
    dockerfile = recipes.add_parser(
        "dockerfile",
        help="write a Dockerfile with EFA, NCCL at torch's version, aws-ofi-nccl and tenter",
        description="Write a Dockerfile that installs the EFA software (libfabric, Open MPI), "
        "builds NCCL at exactly the version the chosen torch was built with, builds "
        "aws-ofi-nccl against them (and optionally nccl-tests), and installs torch and tenter.",
    )
    dockerfile.add_argument("--torch", metavar="VERSION", help="torch version, e.g. 2.5 or 2.5.1")
    dockerfile.add_argument("--cuda", metavar="VERSION", help="CUDA version, e.g. 12.4")
    dockerfile.add_argument(
        "--efa-version", metavar="VERSION", help="EFA installer version, e.g. 1.37.0"
    )
    dockerfile.add_argument(
        "--with-nccl-tests", action="store_true", help="also build nccl-tests in /opt/nccl-tests"
    )
    dockerfile.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE instead of standard output"
    )
    dockerfile.set_defaults(func=write_dockerfile)


def write_dockerfile(args: argparse.Namespace) -> int:
    try:
        recipe = resolve(args.torch, args.cuda, args.efa_version, args.with_nccl_tests)
    except RecipeError as e:
        stderr.print(f"[bold red]error:[/] {escape(e.flag)}: {escape(e.message)}")
        return EXIT_USAGE
    command = ["tenter", "container", "dockerfile", "--torch", recipe.torch, "--cuda", recipe.cuda]
    if args.efa_version:
        command += ["--efa-version", recipe.efa_installer]
    if args.with_nccl_tests:
        command.append("--with-nccl-tests")
    text = render(recipe, shlex.join(command))
    if args.output:
        Path(args.output).write_text(text)
        print(f"wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
