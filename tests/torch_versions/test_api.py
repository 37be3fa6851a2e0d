"""Every supported torch has what tenter uses from it (see api_check's docstring).

The lowest, a middle and the newest supported torch are read from their wheels, which a
first run downloads (about 290 MB, into ~/.cache/tenter/torch-api)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
import tomllib

from tests.torch_versions import api_check

REPO = Path(__file__).resolve().parents[2]
CHECKED = ("2.7.1", "2.10.0", "2.15.0")
"""The lowest supported torch, a middle one (2.8-2.11 share one agent API), the newest."""


@cache
def source(version: str) -> api_check.TorchSource:
    return api_check.TorchSource(api_check.download(version))


@cache
def tenter_uses() -> api_check.Uses:
    return api_check.collect_tree(REPO / "src")


@cache
def results() -> list[api_check.Result]:
    return [api_check.check(tenter_uses(), source(v)) for v in CHECKED]


@pytest.mark.parametrize("version", CHECKED)
def test_every_torch_use_of_tenter_exists_with_its_signature_in(version: str) -> None:
    result = results()[CHECKED.index(version)]
    assert result.problems == []
    assert result.unread < 40, "most uses must be read, not passed unread"


def test_tenter_uses_enough_of_torch_for_the_check_to_mean_something() -> None:
    uses = tenter_uses()
    symbols = {u.symbol for u in uses.uses}
    assert len(symbols) > 150
    assert "torch.distributed.elastic.rendezvous.RendezvousParameters" in symbols
    assert uses.subclasses, "subclasses of torch classes (comm's backend) are read too"


def test_no_subclass_of_a_torch_elastic_class() -> None:
    """tenter's host agent is its own (tenter.launch.agent), on torch's public elastic API."""
    elastic = [
        f"{s.where} {s.name}({', '.join(s.bases)})"
        for s in tenter_uses().subclasses
        if any("torch.distributed.elastic" in base for base in s.bases)
    ]
    assert elastic == []


def test_no_private_torch_name_outside_the_compatibility_modules() -> None:
    assert api_check.private_outside_compat(tenter_uses(), results()) == []


@pytest.mark.parametrize("folder", ["benchmarks", "examples"])
def test_benchmarks_and_examples_use_private_torch_names_only_in_a_compatibility_module(
    folder: str,
) -> None:
    """What users run beside the package keeps the package's rule (benchmarks/compat.py)."""
    uses = api_check.collect_tree(REPO / folder)
    assert len(uses.uses) > 100
    assert api_check.private_outside_compat(uses, []) == []


def test_no_override_of_a_torch_method_that_some_supported_torch_lacks() -> None:
    assert api_check.dropped_overrides(results()) == []


def test_no_line_serves_only_torch_below_the_floor() -> None:
    assert api_check.stale_tags(tenter_uses(), floor()) == []


def torch_requirement() -> str:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return next(d for d in project["dependencies"] if d.startswith("torch"))


def floor() -> tuple[int, int]:
    spec = torch_requirement()
    match = re.fullmatch(r"torch>=(\d+)\.(\d+),<(\d+)\.(\d+)", spec)
    assert match, f"pyproject's torch requirement {spec!r} is not 'torch>=A.B,<C.D'"
    return int(match[1]), int(match[2])


def test_the_checked_torch_versions_are_the_lowest_and_newest_that_pyproject_allows() -> None:
    spec = torch_requirement()
    low, high = CHECKED[0].split(".")[:2], CHECKED[-1].split(".")[:2]
    cap = f"{high[0]}.{int(high[1]) + 1}"
    assert spec == f"torch>={low[0]}.{low[1]},<{cap}"
    stated = f"torch {low[0]}.{low[1]} to {high[0]}.{high[1]}"
    for doc in ("README.md", "docs/launch.md"):
        assert stated in (REPO / doc).read_text(), f"{doc} does not say {stated!r}"


OLD_OVERRIDE = """
import math, signal
from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent

class HostAgent(LocalElasticAgent):
    def _shutdown(self, death_sig: signal.Signals = signal.SIGTERM, timeout: int = 30) -> None:
        super()._shutdown(death_sig, timeout=math.ceil(5.0))
"""
"""tenter's agent before the compatibility module: every job FAILED on torch 2.5-2.11."""


def check_fixture(text: str, version: str) -> list[str]:
    uses = api_check.collect(Path("agent.py"), text)
    return api_check.check(uses, source(version)).problems


def test_the_check_finds_the_shutdown_override_that_broke_torch_2_7_to_2_11() -> None:
    assert check_fixture(OLD_OVERRIDE, "2.7.1") == [
        "agent.py:5: torch 2.7: HostAgent._shutdown does not accept is_restart, which "
        "torch's _shutdown(death_sig, is_restart) has",
        "agent.py:7: torch 2.7: HostAgent's base _shutdown has no parameter timeout",
    ]
    assert check_fixture(OLD_OVERRIDE, "2.10.0") == [
        "agent.py:7: torch 2.10: HostAgent's base _shutdown has no parameter timeout"
    ]
    assert check_fixture(OLD_OVERRIDE, "2.15.0") == []


def test_a_tagged_line_is_checked_only_against_the_versions_it_serves() -> None:
    tagged = OLD_OVERRIDE.replace("ceil(5.0))", "ceil(5.0))  # [torch 2.12+]").replace(
        "timeout: int = 30)", "timeout: int = 30, is_restart: bool = False)"
    )
    assert check_fixture(tagged, "2.7.1") == []
    assert check_fixture(tagged, "2.10.0") == []


def test_the_check_finds_a_missing_name_and_a_wrong_keyword() -> None:
    text = (
        "import torch.distributed as dist\n"
        "from torch.distributed.elastic.agent.server.api import WorkerSpec, Nonesuch\n"
        "WorkerSpec(role='r', local_world_size=1, rdzv_handler=None, restarts=5)\n"
        "dist.all_reduce(t, op=dist.ReduceOp.SUM, async_op=False, group_id=1)\n"
    )
    assert check_fixture(text, "2.10.0") == [
        "agent.py:2: torch 2.10 has no torch.distributed.elastic.agent.server.api.Nonesuch",
        "agent.py:3: torch 2.10: torch.distributed.elastic.agent.server.api.WorkerSpec "
        "has no parameter restarts",
        "agent.py:4: torch 2.10: torch.distributed.all_reduce has no parameter group_id",
    ]
