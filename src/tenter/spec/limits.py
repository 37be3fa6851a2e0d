"""Size bounds of a job spec, checked before it is parsed or validated.

A spec is a few dozen short values. Anything far larger is a mistake (or an attack) that
would otherwise surface late and badly: a YAML alias bomb expanded into a multi-megabyte
message, nesting that overflows the parser's recursion, a value Linux refuses to pass to
a process (``Argument list too long`` after the job directory was made). These checks
run on the raw data, walk it without recursion, and stop at the first bound crossed, so
they take bounded time and memory whatever the input.
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass
from typing import IO, Any

import yaml

from tenter.spec.errors import Problem, SpecError, clip
from tenter.spec.nesting import first_too_deep

MAX_SPEC_BYTES = 8 * 2**20
"""Largest spec file read. Generous on purpose: the checks below then name the field
that is too large, which a refusal of the whole file could not."""
MAX_DEPTH = 32
"""Nesting levels of mappings and lists (PyYAML's composer recurses once per level)."""
MAX_VALUES = 100_000
"""Values in a spec, counting a YAML alias each time it is used (that is what a
validator, and every copy, would expand)."""
MAX_TEXT = 16_384
"""Characters of one string. Linux passes one argument or variable of at most 128 KiB
(MAX_ARG_STRLEN), and a character can take 4 bytes in UTF-8; tenter copies hyperparameters
into several variables besides."""
MAX_ARGS_BYTES = 256 * 2**10
"""``command`` and ``args`` together, in UTF-8 bytes."""
MAX_ENVIRONMENT_BYTES = 256 * 2**10
"""``environment`` (``KEY=VALUE`` strings), in UTF-8 bytes."""
MAX_HYPERPARAMETERS_BYTES = 32 * 2**10
"""``hyperparameters`` as JSON. SageMaker's contract copies them into ``SM_HPS``,
``SM_USER_ARGS`` and ``SM_TRAINING_ENV``: each one variable of at most 128 KiB, the last
one also holding the host list (about 75 KB for MAX_HOSTS)."""
MAX_HOSTS = 1024
"""Hosts of a job. ``SM_TRAINING_ENV`` lists the hosts several times in one variable,
which Linux caps at 128 KiB: about 1,700 hosts fit; 1,024 leave room for the rest."""
MAX_SIMULATED_HOSTS = 156
"""Hosts the local backend simulates, one loopback address each (127.100.0.1 to
127.255.0.1, so that address order is host order)."""
MAX_ISOLATED_HOSTS = 156
"""Hosts with ``isolation: network``, one address each in 198.18.0.0/15 (198.18.100.1 to
198.18.255.1, so that address order is host order)."""
MAX_SECONDS = 28 * 24 * 3600
"""Longest duration a spec may give (SageMaker's limit on max_run: 28 days)."""
WORKER_MEMORY_GIB = 0.25
"""Memory one worker process needs at the least: Python with torch imported holds about
150 MiB of its own, before any model or data."""

_LOADER: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""``safe_load``'s parser: libyaml's where PyYAML was built with it."""
_SIMPLE_KEY = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def key_path(parent: str, key: object) -> str:
    """The dotted path of ``key`` under ``parent``; odd keys are quoted, long ones cut."""
    part = key if isinstance(key, str) and _SIMPLE_KEY.match(key) else clip(repr(key), 40)
    return f"{parent}.{part}" if parent else str(part)


def _too_deep(path: str) -> SpecError:
    return SpecError(
        [
            Problem(
                clip(path, 200),
                f"is nested more than {MAX_DEPTH} levels deep; a job spec needs a few",
                "flatten it, or pass the structure as a file (a channel)",
            )
        ]
    )


def _too_many(path: str) -> SpecError:
    return SpecError(
        [
            Problem(
                clip(path, 200) or "(the whole spec)",
                f"makes the spec hold more than {MAX_VALUES:,} values (a YAML alias counts "
                "each time it is used); a job spec holds a few dozen",
                "pass large data as a file (a channel), not in the spec",
            )
        ]
    )


@dataclass
class _Collection:
    """Where the event walk is inside one mapping or list."""

    is_mapping: bool
    label: str = ""
    """The key (mapping) or index (list) of the node being read."""
    expects_key: bool = True
    items: int = 0


def check_yaml_nesting(text: str, name: str = "<spec>", loader: type[Any] = _LOADER) -> None:
    """Raise SpecError if the YAML document nests deeper than MAX_DEPTH, or holds more
    than MAX_VALUES nodes (aliases are counted later, by :func:`check_bounds`).

    The depth is first found by reading the characters (:mod:`tenter.spec.nesting`), so that
    no PyYAML ever parses the deep part: each has its own limit and message there (see that
    module). Only the text up to the first level too deep is then parsed, to name the field.
    The event walk on the whole text (the parser's event stream is iterative, unlike the
    composer, which recurses once per level) counts the nodes and catches what the scan,
    a lower bound, cannot see.
    """
    too_deep_at = first_too_deep(text, MAX_DEPTH, MAX_VALUES)
    if too_deep_at is not None:
        # The cut text ends inside a node: a parse error there is no answer; the whole
        # text is walked below.
        with contextlib.suppress(yaml.YAMLError):
            _walk_events(named_stream(text[:too_deep_at], name), loader)
    _walk_events(named_stream(text, name), loader)


def named_stream(text: str, name: str) -> io.StringIO:
    """``text`` as a stream called ``name``: YAML's errors then say where, as in
    ``in "job.yaml", line 3, column 5``, rather than ``in "<unicode string>"``."""
    stream = io.StringIO(text)
    stream.name = name
    return stream


def _walk_events(stream: IO[str], loader: type[Any]) -> None:
    """Raise SpecError at the first collection deeper than MAX_DEPTH, or the node past
    MAX_VALUES, of the YAML in ``stream``, naming where it is."""
    open_collections: list[_Collection] = []
    nodes = 0
    for event in yaml.parse(stream, Loader=loader):
        if isinstance(event, yaml.CollectionEndEvent):
            open_collections.pop()
            continue
        if not isinstance(event, yaml.NodeEvent):
            continue
        nodes += 1
        if nodes > MAX_VALUES:
            raise _too_many(".".join(c.label for c in open_collections))
        if open_collections:
            parent = open_collections[-1]
            if not parent.is_mapping:
                parent.label = str(parent.items)
                parent.items += 1
            elif parent.expects_key:
                parent.label = clip(event.value, 40) if isinstance(event, yaml.ScalarEvent) else "?"
            parent.expects_key = not parent.expects_key
        if isinstance(event, yaml.CollectionStartEvent):
            if len(open_collections) == MAX_DEPTH:
                raise _too_deep(".".join(c.label for c in open_collections))
            open_collections.append(
                _Collection(is_mapping=isinstance(event, yaml.MappingStartEvent))
            )


def _children(
    path: str, value: dict[Any, Any] | list[Any] | tuple[Any, ...] | set[Any] | frozenset[Any]
) -> list[tuple[str, Any]]:
    """The keys and values (or items) of a mapping (or list), with their paths."""
    if isinstance(value, dict):
        pairs = [(key_path(path, key), key, item) for key, item in value.items()]
        return [entry for p, key, item in pairs for entry in ((p, key), (p, item))]
    return [(key_path(path, index), item) for index, item in enumerate(value)]


def _text_problem(path: str, text: str) -> Problem | None:
    if "\0" in text:
        return Problem(
            path,
            "contains a NUL character, which no argument, variable or path can hold",
            "remove it",
        )
    if len(text) > MAX_TEXT:
        return Problem(
            path,
            f"is {len(text):,} characters long; a spec value may have at most {MAX_TEXT:,} "
            "(Linux refuses longer arguments and variables)",
            "pass large data as a file (a channel)",
        )
    return None


def check_bounds(data: object) -> None:
    """Raise SpecError if ``data`` (raw YAML, flags or Estimator values) is too deep, too
    large, or holds text no process can be given; walks at most MAX_VALUES values."""
    problems: list[Problem] = []
    stack: list[tuple[str, Any, int]] = [("", data, 0)]
    seen = 1
    while stack:
        path, value, depth = stack.pop()
        if isinstance(value, str):
            problem = _text_problem(path, value)
            if problem:
                problems.append(problem)
            continue
        if not isinstance(value, dict | list | tuple | set | frozenset) or not value:
            continue
        if depth == MAX_DEPTH:
            raise _too_deep(path)
        # Counted before the children are listed: a 4-million-item list is refused
        # without building 4 million entries.
        seen += len(value) * (2 if isinstance(value, dict) else 1)
        if seen > MAX_VALUES:
            raise _too_many(path)
        # reversed: the stack then walks (and reports) in document order.
        stack += [(p, v, depth + 1) for p, v in reversed(_children(path, value))]
    if problems:
        raise SpecError(problems)


def port_problem(field: str, port: int, *, zero_picks_one: bool = False) -> Problem | None:
    """A Problem if ``port`` is no TCP port (1 to 65535; 0 too where ``zero_picks_one``: the
    kernel then chooses a free one), for a flag or field such as ``--metrics-port``."""
    lowest = 0 if zero_picks_one else 1
    if lowest <= port <= 65535:
        return None
    zero = " (0: any free port)" if zero_picks_one else ""
    return Problem(field, f"{port} is not a TCP port", f"use {lowest} to 65535{zero}")
