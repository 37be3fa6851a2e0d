"""``tenter.spec``'s public names stay what they are whatever was imported before: a submodule
named like one of them would replace it on the package once imported (``from tenter.spec
import load`` gave the module ``tenter.spec.load`` after anything imported it directly)."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import importlib, inspect, pkgutil, sys
import tenter.spec as spec
for info in pkgutil.iter_modules(spec.__path__):
    importlib.import_module(f"tenter.spec.{info.name}")
bad = [n for n in spec.__all__ if inspect.ismodule(getattr(spec, n))]
print(bad)
sys.exit(1 if bad else 0)
"""


def test_every_public_name_is_itself_after_every_submodule_was_imported() -> None:
    # A fresh interpreter: which modules this test process imported before is not the point.
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
