"""Nesting is refused by tenter's own rule, before PyYAML parses the deep part (issue 24):
the same message naming the field under libyaml's loader and the pure-Python one, whichever
PyYAML is installed (6.0.4's libyaml refuses deep flow nesting itself, with no field)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import yaml

from tenter.spec import SpecError, limits
from tenter.spec.nesting import first_too_deep

LOADERS = [yaml.SafeLoader] + ([yaml.CSafeLoader] if hasattr(yaml, "CSafeLoader") else [])
"""Both where PyYAML has libyaml (CI's does): tenter uses the C one when it can."""

DEEP = 5000
"""Past PyYAML 6.0.4's own limit (1,000 flow levels) and Python's recursion limit."""

DEEP_SPECS = {
    "flow lists on one line": (
        "hyperparameters: {deep: " + "[" * DEEP + "]" * DEEP + "}\n",
        "hyperparameters.deep.0.0",
    ),
    "flow mappings on one line": (
        "hyperparameters:\n  deep: " + "{a: " * DEEP + "1" + "}" * DEEP + "\n",
        "hyperparameters.deep.a.a",
    ),
    "flow under a block list and an anchor": (
        "args:\n  - x\n  - &anchor " + "[" * DEEP + "\n",
        "args.1.0.0",
    ),
    "JSON-like": (
        'hyperparameters: {"deep":' + "[" * DEEP + "]" * DEEP + "}\n",
        "hyperparameters.deep.0.0",
    ),
    "block mappings": (
        "hyperparameters:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, DEEP)),
        "hyperparameters.k1.k2.k3",
    ),
    "block lists on one line": ("args:\n" + "- " * DEEP + "x\n", "args.0.0.0"),
}

SHALLOW_SPECS = {
    "32 levels": "h: " + "[" * (limits.MAX_DEPTH - 1) + "]" * (limits.MAX_DEPTH - 1) + "\n",
    "brackets in a quoted value": "h: {a: '" + "[" * DEEP + "', b: \"" + "{" * DEEP + '"}\n',
    "brackets in a comment": "# " + "[" * DEEP + "\nh: [1]\n",
    "brackets in a block scalar": "h:\n  a: |\n    " + "[" * DEEP + "\n  b: [1]\n",
    "brackets in a plain value": "h: x" + "[" * DEEP + "\n",
    "brackets in a key": "h" + "[" * limits.MAX_DEPTH * 2 + ": 1\n",
}


def _message(text: str, loader: Any) -> str:
    with pytest.raises(SpecError) as refused:
        limits.check_yaml_nesting("entry_point: train.py\n" + text, "job.yaml", loader)
    return str(refused.value)


@pytest.mark.parametrize("loader", LOADERS, ids=lambda loader: loader.__name__)
@pytest.mark.parametrize("case", DEEP_SPECS, ids=str)
def test_nesting_past_max_depth_is_refused_naming_the_field(case: str, loader: Any) -> None:
    text, field = DEEP_SPECS[case]
    message = _message(text, loader)
    assert message.startswith(field)
    assert f"is nested more than {limits.MAX_DEPTH} levels deep" in message


@pytest.mark.parametrize("loader", LOADERS, ids=lambda loader: loader.__name__)
@pytest.mark.parametrize("case", SHALLOW_SPECS, ids=str)
def test_brackets_that_do_not_nest_are_accepted(case: str, loader: Any) -> None:
    limits.check_yaml_nesting(SHALLOW_SPECS[case], "job.yaml", loader)


def test_a_level_past_max_depth_is_refused() -> None:
    text = "h: " + "[" * limits.MAX_DEPTH + "]" * limits.MAX_DEPTH + "\n"
    assert "h.0.0" in _message(text, LOADERS[-1])


@pytest.mark.parametrize(
    ("text", "offset"),
    [
        ("a: " + "[" * 40, 3 + 33),
        ("a: [{b: [" + "[" * 40, 9 + 30),
        ("a: '[[[[' \n" + "b: " + "[" * 40, 14 + 33),
        ("a: x[[[[\nb: " + "[" * 40, 12 + 33),
        ("a: " + "[]" * 40, None),
    ],
)
def test_first_too_deep_is_just_past_the_opening_past_the_limit(
    text: str, offset: int | None
) -> None:
    assert first_too_deep(text, 32, 1000) == offset


@pytest.mark.parametrize(
    "text",
    [
        "a: " + "x [" * 2_500_000,  # one plain scalar
        "a: [" + "[], " * 2_000_000 + "]",  # more collections than a spec may hold
        "a: |\n" + "  [\n" * 2_000_000,  # one block scalar
        "a: [" + "'[', " * 1_500_000 + "]",
    ],
    ids=["plain", "many lists", "block scalar", "quoted"],
)
def test_the_scan_of_8_mib_takes_a_bounded_time(text: str) -> None:
    start = time.process_time()
    assert first_too_deep(text, limits.MAX_DEPTH, limits.MAX_VALUES) is None
    assert time.process_time() - start < 2.0  # 0.1 to 0.4 s here; quadratic: minutes
