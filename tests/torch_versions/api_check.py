"""Does every supported torch have what tenter uses from it, with the same signatures?

Read statically, so that CI (one torch installed) checks the others too: the uses come from
tenter's own source with ``ast``, the definitions from the ``.py`` files (and, for what
torch implements in C++, the ``.pyi`` stubs) of each checked torch's wheel, read straight
from the wheel (the macOS CPU wheel: the smallest; its Python files are the same on every
platform). The wheels are kept in :data:`CACHE`, so only a first run downloads them.

What is checked, each use against the torch versions its line serves (a tag ``[torch 2.7]``,
``[torch 2.8-2.11]`` or ``[torch 2.12+]`` in a comment on the line; no tag: all):

- every name imported from torch, and every attribute chain on one (``dist.ProcessGroup
  .BackendType.CUSTOM``; ``getattr(x, "name")`` counts as ``x.name``; a local variable
  assigned a torch class's instance stands for the class);
- every call of one: its positional count and keyword names against the parameters (any
  of the overloads; a class through its ``__init__`` or its dataclass fields);
- every tenter class with a torch base: each method that overrides one of the base's
  accepts every parameter the base's has (torch calls it so), each private method it
  defines exists in the base (else torch never calls it), each ``super().m(...)`` call and
  each ``self._x`` of the base's.

What cannot be read this way passes unchecked and is counted: attributes of what a torch
function returns (a tensor's methods), members of a module that defines ``__getattr__``,
and the methods of torch's C++ classes that the stubs leave out.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from tests.torch_versions.torch_source import (
    ALL,
    NOT_IN_STUBS,
    Definition,
    TorchSource,
    Version,
    attribute_chain,
    download,
)

__all__ = ["TorchSource", "download"]

TAG = re.compile(r"#.*\[torch (\d+)\.(\d+)(?:(\+)|-(\d+)\.(\d+))?\]")


# ---- tenter's side: what it uses ------------------------------------------------------------


@dataclass(frozen=True)
class Call:
    positional: int
    keywords: tuple[str, ...]
    star: bool  # *args or **kwargs: the counts are unknown


@dataclass(frozen=True)
class Use:
    where: str  # file:line
    symbol: str  # torch.a.B.c
    versions: tuple[Version, Version]
    call: Call | None = None
    bound: bool = False  # called on an instance (self is not passed)


@dataclass
class Subclass:
    where: str
    name: str
    bases: list[str]
    methods: dict[str, ast.FunctionDef]
    uses: list[Use]  # super().m(...) calls and self._x of the base's


@dataclass
class Uses:
    uses: list[Use] = field(default_factory=list)
    subclasses: list[Subclass] = field(default_factory=list)


def _tags(text: str) -> dict[int, tuple[Version, Version]]:
    out = {}
    for number, line in enumerate(text.splitlines(), 1):
        m = TAG.search(line)
        if m:
            lo = (int(m[1]), int(m[2]))
            hi = (99, 99) if m[3] else (int(m[4]), int(m[5])) if m[4] else lo
            out[number] = (lo, hi)
    return out


def collect(path: Path, text: str | None = None, root: Path | None = None) -> Uses:
    """Every torch use in one tenter source file."""
    text = path.read_text() if text is None else text
    tree = ast.parse(text)
    tags = _tags(text)
    name = str(path.relative_to(root)) if root else str(path)
    aliases: dict[str, str] = {}
    out = Uses()

    def versions(node: ast.AST) -> tuple[Version, Version]:
        first, last = node.lineno, getattr(node, "end_lineno", None) or node.lineno  # type: ignore[attr-defined]
        return next((tags[n] for n in range(first, last + 1) if n in tags), ALL)

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "torch":
                    aliases[a.asname or "torch"] = a.name if a.asname else "torch"
                    out.uses.append(Use(f"{name}:{node.lineno}", a.name, versions(node)))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
                imported = f"{node.module}.{a.name}"
                out.uses.append(Use(f"{name}:{node.lineno}", imported, versions(node)))

    parents = {id(c): n for n in ast.walk(tree) for c in ast.iter_child_nodes(n)}
    instances: dict[tuple[int, str], str] = {}  # (function, variable) -> torch class

    def function_of(node: ast.AST) -> int:
        while node is not None and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            node = parents.get(id(node))  # type: ignore[assignment]
        return id(node)

    def symbol(node: ast.AST) -> tuple[str | None, bool]:
        """The torch name ``node`` stands for, and whether it is on an instance."""
        chain = attribute_chain(node)
        if not chain:
            return None, False
        head, _, rest = chain.partition(".")
        instance = instances.get((function_of(node), head))
        base = instance or aliases.get(head)
        if base is None or (instance and not rest):
            return None, False
        return (f"{base}.{rest}" if rest else base), instance is not None

    for n in ast.walk(tree):  # a variable bound once to a torch class's instance
        if (
            isinstance(n, ast.Assign) and len(n.targets) == 1
            and isinstance(n.targets[0], ast.Name) and isinstance(n.value, ast.Call)
        ):  # fmt: skip
            made, _ = symbol(n.value.func)
            if made:
                instances[(function_of(n), n.targets[0].id)] = made
    for n in ast.walk(tree):
        if not isinstance(n, ast.Attribute | ast.Name | ast.Call) or attribute_chain(n) is None:
            continue
        parent = parents.get(id(n))
        if isinstance(parent, ast.Attribute) or (
            isinstance(parent, ast.Call) and attribute_chain(parent) and parent.args[:1] == [n]
        ):
            continue  # part of a longer chain
        called = isinstance(parent, ast.Call) and parent.func is n
        if isinstance(n, ast.Name) and not called:
            continue  # a bare name: its import is the use
        sym, bound = symbol(n)
        if sym is not None:
            call = _call(parent) if called else None  # type: ignore[arg-type]
            out.uses.append(Use(f"{name}:{n.lineno}", sym, versions(n), call, bound))

    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef):
            continue
        bases = [s for b in cls.bases if (s := symbol(b)[0])]
        if not bases:
            continue
        methods = {m.name: m for m in cls.body if isinstance(m, ast.FunctionDef)}
        own = set(methods) | {
            t.attr for m in methods.values() for t in ast.walk(m)
            if isinstance(t, ast.Attribute) and isinstance(t.ctx, ast.Store)
        }  # fmt: skip
        uses = []
        for n in ast.walk(cls):
            if (
                isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                and isinstance(n.func.value, ast.Call) and isinstance(n.func.value.func, ast.Name)
                and n.func.value.func.id == "super"
            ):  # fmt: skip
                uses.append(Use(f"{name}:{n.lineno}", n.func.attr, versions(n), _call(n), True))
            elif (
                isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
                and n.value.id == "self" and n.attr.startswith("_")
                and not n.attr.startswith("__") and n.attr not in own
            ):  # fmt: skip
                uses.append(Use(f"{name}:{n.lineno}", n.attr, versions(n)))
        out.subclasses.append(Subclass(f"{name}:{cls.lineno}", cls.name, bases, methods, uses))
    return out


def _call(node: ast.Call) -> Call:
    star = any(isinstance(a, ast.Starred) for a in node.args) or any(
        k.arg is None for k in node.keywords
    )
    return Call(len(node.args), tuple(k.arg for k in node.keywords if k.arg), star)


def collect_tree(root: Path) -> Uses:
    """Every torch use in the package under ``root`` (``src``)."""
    out = Uses()
    for path in sorted(root.rglob("*.py")):
        found = collect(path, root=root)
        out.uses += found.uses
        out.subclasses += found.subclasses
    return out


# ---- the check --------------------------------------------------------------------------------


def _signatures(found: Definition, source: TorchSource) -> list[tuple[ast.arguments, bool]]:
    """Each overload's parameters, and whether its first one is ``self``/``cls``."""
    if found.kind == "function":
        out = []
        for f in found.nodes:
            assert isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
            decorators = {attribute_chain(d) for d in f.decorator_list}
            if "property" in decorators or any(d and d.endswith(".setter") for d in decorators):
                return []
            out.append((f.args, "staticmethod" not in decorators))
        return out
    if found.kind == "class":
        init = source.member(found, "__init__")
        if init is not None and init.kind == "function":
            return [(args, True) for args, _ in _signatures(init, source)]
        node = found.nodes[0]
        assert isinstance(node, ast.ClassDef)
        decorators = [
            attribute_chain(d.func if isinstance(d, ast.Call) else d) or ""
            for d in node.decorator_list
        ]
        if any("dataclass" in d for d in decorators):
            fields = [
                ast.arg(s.target.id) for s in node.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                and "ClassVar" not in ast.unparse(s.annotation)
            ]  # fmt: skip
            return [(ast.arguments([], fields, None, [], [], None, []), False)]
    return []


def _accepts(args: ast.arguments, method: bool, call: Call, bound: bool) -> str | None:
    positional = [*args.posonlyargs, *args.args][1 if method and bound else 0 :]
    named = {a.arg for a in [*args.args, *args.kwonlyargs]}
    if not call.star and call.positional > len(positional) and args.vararg is None:
        return f"takes {len(positional)} positional arguments, tenter passes {call.positional}"
    missing = [k for k in call.keywords if k not in named]
    if missing and args.kwarg is None:
        return f"has no parameter {', '.join(missing)}"
    return None


def _params(args: ast.arguments) -> list[str]:
    return [a.arg for a in [*args.args, *args.kwonlyargs][1:]]


@dataclass
class Result:
    version: Version
    problems: list[str]
    unread: int
    """Uses that could not be read statically (see the module's docstring)."""
    overrides: set[str]
    """tenter's private methods that override one of torch's."""
    own: set[str]
    """tenter's private methods that override nothing of this torch's."""


def check(uses: Uses, source: TorchSource) -> Result:
    """Problems of tenter's uses under this torch."""
    problems: list[str] = []
    unread = 0
    overrides: set[str] = set()
    own: set[str] = set()
    v = source.version
    label = f"torch {v[0]}.{v[1]}"

    def applies(use: Use) -> bool:
        return use.versions[0] <= v <= use.versions[1]

    def check_call(use: Use, found: Definition, what: str) -> None:
        if use.call is None:
            return
        signatures = _signatures(found, source)
        bound = use.bound or found.kind == "class"
        verdicts = [_accepts(a, m, use.call, bound) for a, m in signatures]
        if signatures and all(verdicts):
            problems.append(f"{use.where}: {label}: {what} {verdicts[0]}")

    for use in uses.uses:
        if not applies(use):
            continue
        found = source.resolve(use.symbol)
        if found is None and any(use.symbol.startswith(k) for k in NOT_IN_STUBS):
            unread += 1
        elif found is None:
            problems.append(f"{use.where}: {label} has no {use.symbol}")
        elif found.kind == "unknown":
            unread += 1
        else:
            check_call(use, found, use.symbol)
    for sub in uses.subclasses:
        bases = [b for s in sub.bases if (b := source.resolve(s)) is not None]
        if len(bases) < len(sub.bases):
            continue  # reported above, as an import

        def inherited(name: str, bases: list[Definition] = bases) -> Definition | None:
            return next((m for b in bases if (m := source.member(b, name)) is not None), None)

        for name, method in sub.methods.items():
            base_method = inherited(name)
            if _private(name):
                method_id = f"{sub.where}: {sub.name}.{name}"
                (overrides if base_method is not None else own).add(method_id)
            if base_method is None:
                continue
            if base_method.kind != "function" or name in ("__init__", "forward"):  # by design
                continue
            theirs = [_params(a) for a, _ in _signatures(base_method, source)]
            accepted = set(_params(method.args))
            has_kwargs = method.args.kwarg is not None
            for params in theirs[:1]:
                extra = [p for p in params if p not in accepted]
                if extra and not has_kwargs:
                    problems.append(
                        f"{sub.where}: {label}: {sub.name}.{name} does not accept "
                        f"{', '.join(extra)}, which torch's {name}({', '.join(params)}) has"
                    )
        for use in sub.uses:
            if not applies(use):
                continue
            found = inherited(use.symbol)
            if found is None:
                problems.append(f"{use.where}: {label}: {sub.name}'s base has no {use.symbol}")
            elif found.kind == "unknown":
                unread += 1
            else:
                check_call(use, found, f"{sub.name}'s base {use.symbol}")
    return Result(v, problems, unread, overrides, own)


def stale_tags(uses: Uses, floor: Version) -> list[str]:
    """Lines that serve only torch versions below the floor: to delete."""
    lines = {(u.where, u.versions) for u in uses.uses if u.versions[1] < floor}
    return sorted(f"{where}: serves only torch below {floor[0]}.{floor[1]}" for where, _ in lines)


def dropped_overrides(results: list[Result]) -> list[str]:
    """tenter's private methods that override torch's in one checked torch and nothing in
    another: that torch never calls them (a hook renamed or removed)."""
    everywhere = set().union(*(r.overrides for r in results))
    return sorted(
        f"{method}: torch {r.version[0]}.{r.version[1]} has no such method to override"
        for r in results
        for method in everywhere & r.own
    )


def private_outside_compat(uses: Uses, results: list[Result]) -> list[str]:
    """Private torch names used outside the compatibility modules (``*/compat.py``)."""
    out = []

    def in_compat(where: str) -> bool:
        return where.split(":")[0].endswith("compat.py")

    for use in uses.uses:
        if any(_private(p) for p in use.symbol.split(".")) and not in_compat(use.where):
            out.append(f"{use.where}: {use.symbol}")
    overrides = set().union(*(r.overrides for r in results))
    out += [f"{m} overrides a private torch method" for m in overrides if not in_compat(m)]
    for sub in uses.subclasses:
        if not in_compat(sub.where):
            out += [
                f"{u.where}: {sub.name} uses its torch base's {u.symbol}"
                for u in sub.uses
                if _private(u.symbol)
            ]
    return sorted(out)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")
