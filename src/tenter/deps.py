"""Optional dependencies: check for one before any work starts, and say how to install it.

    require("matplotlib", extra="plot", feature="tenter scale")
    # MissingDependencyError: tenter scale: needs matplotlib. Fix: pip install 'tenter[plot]'

A command calls :func:`require` first, so that a missing package stops it before it runs a
job or writes a file, rather than with a ``ModuleNotFoundError`` halfway through. Torch-free
and light to import: every layer may call it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import re

from tenter.errors import MissingToolError

_RELEASE = re.compile(r"\d+(?:\.\d+)*")


class MissingDependencyError(MissingToolError):
    """An optional package a feature needs is not installed (or is too old): exit code 5."""

    def __init__(self, feature: str, package: str, extra: str, installed: str | None = None):
        self.feature, self.package, self.extra, self.installed = feature, package, extra, installed
        found = f" ({installed} is installed)" if installed else ""
        super().__init__(feature, f"needs {package}{found}", f"pip install 'tenter[{extra}]'")


def release(version: str) -> tuple[int, ...]:
    """The numeric release of a version string: ``"0.20.0rc1"`` -> ``(0, 20, 0)``.

    Written here because ``packaging`` is not one of tenter's dependencies, and a floor check
    needs only the release numbers."""
    match = _RELEASE.match(version)
    return tuple(int(part) for part in match.group(0).split(".")) if match else ()


def require(
    module: str,
    extra: str,
    feature: str,
    *,
    distribution: str | None = None,
    minimum: str | None = None,
) -> None:
    """Raise :class:`MissingDependencyError` unless ``module`` imports (and its distribution,
    ``distribution`` or the module's name, is at least ``minimum``).

    ``extra`` is tenter's extra that installs it (``pip install 'tenter[EXTRA]'``), ``feature``
    what needs it, as the user typed it (``tenter report``, ``tenter run --metrics-port``).
    """
    package = distribution or module
    needed = f"{package} >= {minimum}" if minimum else package
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise MissingDependencyError(feature, needed, extra) from e
    if minimum is None:
        return
    try:
        installed = importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return  # importable but not installed as a distribution (vendored): nothing to compare
    if release(installed) < release(minimum):
        raise MissingDependencyError(feature, needed, extra, installed)
