"""One torch's Python sources and stubs, read from its wheel without installing it: what
tests/torch_versions/api_check.py checks tenter's uses against."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

CACHE = Path(os.environ.get("TENTER_TORCH_API_CACHE", "~/.cache/tenter/torch-api")).expanduser()
Version = tuple[int, int]
NOT_IN_STUBS = {
    "torch.distributed.ProcessGroupGloo._Options": "bound in C++ (ProcessGroupGloo::Options, "
    "init.cpp), left out of torch/_C/_distributed_c10d.pyi; tests/comm runs it on CI's torch",
    "torch.distributed.PrefixStore.check": "Store::check, bound in C++ (init.cpp) on every "
    "torch tenter supports, left out of torch 2.7's stubs; called on torch 2.7.1 by hand "
    "(PrefixStore over a HashStore: True for a key set), on CI's torch by tests/launch/agent",
}
"""What tenter uses that no checked file defines, and why it cannot be read."""
ALL: tuple[Version, Version] = ((0, 0), (99, 99))


def download(version: str) -> Path:
    """The macOS arm64 wheel of torch ``version`` (2.12 on are built for macOS 14)."""
    for cached in sorted(CACHE.glob(f"torch-{version}-*.whl")):
        return cached
    CACHE.mkdir(parents=True, exist_ok=True)
    # A machine-wide pip configuration may cap torch at what it installs (constraints):
    # these wheels are read, never installed.
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull}
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
         "--only-binary=:all:", "--platform", "macosx_14_0_arm64", "--platform",
         "macosx_11_0_arm64", "--python-version", "3.11", f"torch=={version}", "-d", str(CACHE)],
        check=True, env=env, timeout=900,
    )  # fmt: skip
    return next(iter(sorted(CACHE.glob(f"torch-{version}-*.whl"))))


@dataclass
class Definition:
    kind: str  # module, class, function, value or unknown (cannot be read further)
    module: str = ""
    nodes: list[ast.AST] = field(default_factory=list)


UNKNOWN = Definition("unknown")


class TorchSource:
    """One torch's Python sources and stubs, parsed as they are needed."""

    def __init__(self, wheel: Path) -> None:
        self.zip = zipfile.ZipFile(wheel)
        self.files = set(self.zip.namelist())
        self.version: Version = tuple(int(p) for p in wheel.name.split("-")[1].split(".")[:2])  # type: ignore[assignment]
        self._parsed: dict[str, ast.Module | None] = {}

    def module(self, name: str) -> ast.Module | None:
        if name not in self._parsed:
            self._parsed[name] = None
            base = name.replace(".", "/")
            for suffix in (".py", "/__init__.py", ".pyi", "/__init__.pyi"):
                path = base + suffix
                if path in self.files:
                    self._parsed[name] = ast.parse(self.zip.read(path))
                    break
        return self._parsed[name]

    def is_package(self, name: str) -> bool:
        base = name.replace(".", "/")
        return f"{base}/__init__.py" in self.files or f"{base}/__init__.pyi" in self.files

    def resolve(self, dotted: str) -> Definition | None:
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            if self.module(".".join(parts[:i])) is not None:
                found: Definition | None = Definition("module", ".".join(parts[:i]))
                for name in parts[i:]:
                    found = self.member(found, name) if found else None
                return found
        return None

    def member(self, owner: Definition, name: str, depth: int = 0) -> Definition | None:
        if owner.kind == "unknown" or depth > 30:
            return UNKNOWN
        if owner.kind == "module":
            return self._module_member(owner.module, name, depth)
        if owner.kind == "class":
            return self._class_member(owner, name, depth)
        return UNKNOWN  # an attribute of a function or a value: not read statically

    def _module_member(self, module: str, name: str, depth: int) -> Definition | None:
        tree = self.module(module)
        assert tree is not None
        found = _defined_in(list(_module_level(tree.body)), name, module)
        if found is not None:
            return self._follow(found, module, depth)
        package = module if self.is_package(module) else module.rpartition(".")[0]
        for stmt in _module_level(tree.body):
            if isinstance(stmt, ast.ImportFrom) and stmt.names[0].name == "*":
                source = _absolute(stmt, package)
                if source.startswith("torch") and self.module(source) is not None:
                    star = self._module_member(source, name, depth + 1)
                    if star is not None:
                        return star
        if self.module(f"{module}.{name}") is not None:
            return Definition("module", f"{module}.{name}")
        if _defined_in(list(_module_level(tree.body)), "__getattr__", module) is not None:
            return UNKNOWN  # a lazy module
        return None

    def _follow(self, found: Definition, module: str, depth: int) -> Definition | None:
        """An import or alias found in ``module``: what it names."""
        node = found.nodes[0]
        package = module if self.is_package(module) else module.rpartition(".")[0]
        if isinstance(node, ast.ImportFrom):
            source = _absolute(node, package)
            if not source.startswith("torch"):
                return UNKNOWN
            wanted = next(a.name for a in node.names if (a.asname or a.name) == found.kind)
            if self.module(f"{source}.{wanted}") is not None:
                return Definition("module", f"{source}.{wanted}")
            return (
                self.member(Definition("module", source), wanted, depth + 1)
                if self.module(source)
                else UNKNOWN
            )
        if isinstance(node, ast.Import):
            alias = next(a for a in node.names if (a.asname or a.name.split(".")[0]) == found.kind)
            target = alias.name if alias.asname else alias.name.split(".")[0]
            return Definition("module", target) if target.startswith("torch") else UNKNOWN
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name | ast.Attribute):
            chain = attribute_chain(node.value)
            if chain:
                owner: Definition | None = Definition("module", module)
                for part in chain.split("."):
                    owner = self.member(owner, part, depth + 1) if owner else None
                return owner if owner is not None else UNKNOWN
        return found

    def _class_member(self, cls: Definition, name: str, depth: int) -> Definition | None:
        node = cls.nodes[0]
        assert isinstance(node, ast.ClassDef)
        found = _defined_in(node.body, name, cls.module)
        if found is not None:
            return self._follow(found, cls.module, depth) if found.kind == name else found
        for method in node.body:
            if isinstance(method, ast.FunctionDef) and _assigns_self(method, name):
                return Definition("value", cls.module, [method])
        for base in self.bases(cls):
            inherited = self.member(base, name, depth + 1)
            if inherited is not None:
                return inherited
        return None

    def bases(self, cls: Definition) -> Iterator[Definition]:
        node = cls.nodes[0]
        assert isinstance(node, ast.ClassDef)
        for expr in node.bases:
            chain = attribute_chain(expr)
            if not chain:
                continue
            owner: Definition | None = Definition("module", cls.module)
            for part in chain.split("."):
                owner = self.member(owner, part) if owner else None
            if owner is not None and owner.kind == "class":
                yield owner


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that bind names of a module: into if/try/with, not into functions."""
    for stmt in body:
        yield stmt
        if isinstance(stmt, ast.If | ast.With):
            yield from _module_level(stmt.body)
            yield from _module_level(getattr(stmt, "orelse", []))
        elif isinstance(stmt, ast.Try):
            for block in (stmt.body, stmt.orelse, stmt.finalbody, *(h.body for h in stmt.handlers)):
                yield from _module_level(block)


def _defined_in(body: list[ast.stmt], name: str, module: str) -> Definition | None:
    """What binds ``name`` among ``body``'s statements; an import or alias has the bound name
    as its kind, for :meth:`TorchSource._follow`."""
    functions: list[ast.AST] = []
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name == name:
            functions.append(stmt)  # overloads, or a property's getter and setter
        elif isinstance(stmt, ast.ClassDef) and stmt.name == name:
            return Definition("class", module, [stmt])
        elif isinstance(stmt, ast.AnnAssign) and attribute_chain(stmt.target) == name:
            return Definition("value", module, [stmt])
        elif isinstance(stmt, ast.Assign) and any(_binds(t, name) for t in stmt.targets):
            alias = isinstance(stmt.value, ast.Name | ast.Attribute)
            return Definition(name if alias else "value", module, [stmt])
        elif isinstance(stmt, ast.ImportFrom | ast.Import):
            for a in stmt.names:
                bound = a.asname or a.name
                if bound.split(".")[0] == name and a.name != "*":
                    return Definition(name, module, [stmt])
    return Definition("function", module, functions) if functions else None


def _binds(target: ast.expr, name: str) -> bool:
    if isinstance(target, ast.Tuple | ast.List):
        return any(_binds(t, name) for t in target.elts)
    return isinstance(target, ast.Name) and target.id == name


def _assigns_self(method: ast.FunctionDef, name: str) -> bool:
    return any(
        isinstance(n, ast.Attribute)
        and isinstance(n.ctx, ast.Store)
        and n.attr == name
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
        for n in ast.walk(method)
    )


def _absolute(node: ast.ImportFrom, package: str) -> str:
    if not node.level:
        return node.module or ""
    base = package.split(".")
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def attribute_chain(node: ast.AST) -> str | None:
    """``a.b.c`` for a chain of attributes on a name; ``getattr(a, "b")`` as ``a.b``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = attribute_chain(node.value)
        return f"{inner}.{node.attr}" if inner else None
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) == 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    ):
        inner = attribute_chain(node.args[0])
        return f"{inner}.{node.args[1].value}" if inner else None
    return None
