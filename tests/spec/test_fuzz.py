"""Fuzzing the spec loader: whatever a spec file or a dict holds, loading it returns a spec
or raises SpecError with a short report; the CLI then exits 0 or 2, never with a traceback.

Bounded for CI by ``max_examples``; ``deadline=None`` because this machine's load makes
per-example timings noise (the bad-input table bounds the time of the known slow cases).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from tenter.spec import JobSpec, SpecError, load, load_file
from tests.conftest import tenter

FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,  # leave no .hypothesis directory behind
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
REPORT_LIMIT = 6_000


def _spec_names(model: type[BaseModel]) -> set[str]:
    """Every field name of the spec's models, nested ones included: fuzzed keys hit real
    fields often enough to get past the unknown-key check into the rules."""
    names = set()
    for name, info in model.model_fields.items():
        names.add(name)
        for annotation in (info.annotation, *getattr(info.annotation, "__args__", ())):
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                names |= _spec_names(annotation)
    return names


NAMES = sorted(_spec_names(JobSpec) | {"hosts"})
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(),
    st.text(max_size=20),
    st.sampled_from(
        ["train.py", ".", "local", "mpi", "ml.p4d.24xlarge", "~no-such-user/x", "c10d"]
    ),
)
keys = st.one_of(st.sampled_from(NAMES), st.text(max_size=8))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(keys, inner, max_size=4)),
    max_leaves=24,
)
spec_dicts = st.dictionaries(keys, values, max_size=8).map(
    lambda d: {"entry_point": "train.py", **d}
)
yaml_texts = st.one_of(
    spec_dicts.map(lambda d: yaml.safe_dump(d, allow_unicode=True)),
    st.text(alphabet="ab:-[]{}&*!|>'\"#%@`,?\n \t\\0x\x00\u00e9", max_size=200),
)


def assert_loads_or_reports(load_call: Any) -> None:
    try:
        load_call()
    except SpecError as e:
        assert 0 < len(str(e)) < REPORT_LIMIT


@FUZZ
@given(data=spec_dicts)
def test_load_returns_a_spec_or_raises_spec_error_for_any_dict(
    data: dict[str, Any], tmp_path: Path
) -> None:
    (tmp_path / "train.py").touch()
    assert_loads_or_reports(lambda: load(data, tmp_path))


@FUZZ
@given(content=st.one_of(yaml_texts.map(str.encode), st.binary(max_size=300)))
def test_load_file_returns_a_spec_or_raises_spec_error_for_any_file(
    content: bytes, tmp_path: Path
) -> None:
    (tmp_path / "train.py").touch()
    spec = tmp_path / "job.yaml"
    spec.write_bytes(content)
    assert_loads_or_reports(lambda: load_file(spec, {"hosts": 1}))


@settings(FUZZ, max_examples=5)
@given(text=yaml_texts)
def test_plan_exits_0_or_2_without_a_traceback(text: str, tmp_path: Path) -> None:
    (tmp_path / "train.py").touch()
    spec = tmp_path / "job.yaml"
    spec.write_text(text)
    result = tenter("plan", str(spec), timeout=60)
    assert result.returncode in (0, 2), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
