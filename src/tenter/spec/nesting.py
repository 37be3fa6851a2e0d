"""How deep a YAML text nests in flow collections (``[...]``, ``{...}``), found by reading its
characters before any YAML parser runs.

Written by hand because a parser's own answer depends on which PyYAML a user has: PyYAML
6.0.4's libyaml refuses more than 1,000 flow levels in its scanner ("exceeded maximum
nesting depth"), earlier releases accept them, and the pure-Python composer overflows
Python's stack at about 1,000 levels. The scanner also reads up to 1,024 characters ahead
(a possible simple key) before it hands out one event, so even an event walk with its own
depth rule never sees a ``[[[[...`` line it could refuse. Block nesting (indentation) is
scanned without that look-ahead, so the event walk of :mod:`tenter.spec.limits` catches it
whatever the PyYAML; only flow nesting needs this scan.

The scan is a lower bound: it counts every ``[`` or ``{`` that may open a collection (one
inside a flow collection, or one that begins a node in a block), skips comments, quoted
scalars and block scalars (where a ``]`` closes nothing), and so never sees less depth than
there is. It may see more (a ``[`` inside a plain scalar that starts a line): the caller
confirms with the parser on the text up to the place found. One pass, no recursion; it
stops after ``max_nodes`` collections and quoted scalars, as many as a spec may hold (the
event walk refuses more, before the place where the scan stopped).
"""

from __future__ import annotations

import re

_QUOTED = {
    "'": re.compile(r"'(?:[^']|'')*'"),
    '"': re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL),
}
_SYNTAX = re.compile(r"[\[\]{}'\"#|>\n]")
"""What the scan stops at; it steps over everything else in one regex search."""
_FLOW_PLAIN_END = re.compile(r"[\[\]{},]|[ \t]#")
_BLOCK_PLAIN_END = re.compile(r":[ \t]|[ \t]#|\n")
"""Where a plain scalar (or a key in it) may end, in a flow collection or in a block."""
_BLANKS = " \t\r"
_INDENT = re.compile(r"[ \t\r]*")


def first_too_deep(text: str, max_depth: int, max_nodes: int) -> int | None:
    """The offset just past the ``[`` or ``{`` at which ``text`` first nests more than
    ``max_depth`` flow collections deep, or None where the scan finds none (or stops after
    ``max_nodes`` flow collections and quoted scalars)."""
    if text.count("[") + text.count("{") <= max_depth:
        return None  # a spec's usual case: too few to nest that deep
    depth = nodes = 0
    line_start = pos = 0
    while nodes <= max_nodes and (match := _SYNTAX.search(text, pos)):
        pos, char = match.start(), match.group()
        if char == "\n":
            line_start = pos = pos + 1
        elif char in "[{" and (depth or _starts_node(text, pos, line_start, depth)):
            depth += 1
            if depth > max_depth:
                return pos + 1
            pos += 1
            nodes += 1
        elif char in "]}":
            depth = max(0, depth - 1)
            pos += 1
        elif char == "#" and (pos == line_start or text[pos - 1] in _BLANKS + "\n"):
            pos = text.find("\n", pos)  # a comment, to the end of its line
            if pos < 0:
                return None
        elif char in _QUOTED and _starts_node(text, pos, line_start, depth):
            quoted = _QUOTED[char].match(text, pos)
            pos = quoted.end() if quoted else pos + 1  # unclosed: the parser reports it
            nodes += 1
        elif char in "|>" and not depth and _starts_node(text, pos, line_start, depth):
            pos = _block_scalar_end(text, pos, line_start)
        else:  # inside a plain scalar: nothing opens before it ends
            plain_end = (_FLOW_PLAIN_END if depth else _BLOCK_PLAIN_END).search(text, pos + 1)
            pos = plain_end.start() if plain_end else len(text)
    return None


def _starts_node(text: str, pos: int, line_start: int, depth: int) -> bool:
    """Whether the character at ``pos`` is the first of a node: the first of its line, or
    after an indicator (``- ``, ``: ``, ``? ``; in a flow collection also ``[``, ``{``,
    ``,``), an anchor or a tag."""
    end = pos
    while True:
        before = end
        while before > line_start and text[before - 1] in _BLANKS:
            before -= 1
        if before == line_start:
            return True
        indicator = text[before - 1]
        if depth and indicator in "[{,":
            return True
        if depth and indicator == ":" and text[before - 2 : before - 1] in ("'", '"', "]", "}"):
            return True  # JSON-like: {"key":[...]}
        if before == end:
            return False  # no blank between: one plain scalar, such as a[0]
        if indicator == ":" or (
            indicator in "-?" and (before - 1 == line_start or text[before - 2] in _BLANKS)
        ):
            return True
        word = before
        while word > line_start and text[word - 1] not in _BLANKS:
            word -= 1
        if text[word] not in "&!":
            return False
        end = word  # an anchor or a tag: what stands before it decides


def _block_scalar_end(text: str, pos: int, line_start: int) -> int:
    """The offset of the line break that ends the block scalar (``|`` or ``>``) begun at
    ``pos``: its content is every following line indented deeper than the indicator's
    line, and every blank line."""
    indent = _indent(text, line_start)
    end = re.compile(rf"\n {{0,{indent}}}[^ \r\n]").search(text, pos)  # re caches it
    return end.start() if end else len(text)


def _indent(text: str, line_start: int) -> int:
    blanks = _INDENT.match(text, line_start)
    return blanks.end() - line_start if blanks else 0
