"""``fault_tolerance`` specs tenter cannot run: refused before anything starts, naming the
field and the fix (exit 2), or by a backend that cannot run replica groups yet (exit 3)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from tenter.errors import ExitCode
from tests.conftest import tenter

FT = {"replica_groups": 2, "min_replicas": 1}


def write(tmp_path: Path, **fields: object) -> Path:
    (tmp_path / "train.py").write_text("")
    spec = tmp_path / "job.yaml"
    job = {"entry_point": "train.py", "instance_count": 2, "fault_tolerance": FT, **fields}
    spec.write_text(yaml.safe_dump(job))
    return spec


def assert_refused(tmp_path: Path, spec: Path, *texts: str) -> None:
    for verb in ("plan", "run"):
        done = tenter(verb, str(spec), "--output-dir", str(tmp_path / "jobs"))
        assert done.returncode == ExitCode.BAD_INPUT, done.stderr
        assert "Traceback" not in done.stderr
        for text in texts:
            assert text in done.stderr
    assert not (tmp_path / "jobs").exists()


@pytest.mark.parametrize(
    ("fields", "texts"),
    [
        (
            {"fault_tolerance": {"replica_groups": 2, "min_replicas": 3}},
            ("fault_tolerance.min_replicas", "lower min_replicas or raise replica_groups"),
        ),
        (
            {"instance_count": 3},
            ("fault_tolerance.replica_groups", "a multiple of replica_groups"),
        ),
        (
            {
                "distribution": {
                    "smdistributed": {
                        "modelparallel": {
                            "enabled": True,
                            "parameters": {"pipeline_parallel_degree": 1},
                        }
                    }
                }
            },
            ("fault_tolerance", "cannot be combined with distribution.smdistributed.modelparallel"),
        ),
        (
            {"elastic": {"min_hosts": 1, "max_hosts": 2}},
            ("fault_tolerance", "replaces elastic.min_hosts/max_hosts"),
        ),
        ({"backend": "mpi"}, ("fault_tolerance", "mpirun runs one world")),
    ],
    ids=["min_replicas over groups", "uneven groups", "modelparallel", "elastic hosts", "mpi"],
)
def test_a_spec_replica_groups_cannot_run_is_refused(
    tmp_path: Path, fields: dict[str, object], texts: tuple[str, ...]
) -> None:
    assert_refused(tmp_path, write(tmp_path, **fields), *texts)


def test_without_torchft_installed_the_spec_is_refused_with_the_install_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Python where torchft does not import: the standard way to hide an installed module.
    hider = tmp_path / "hide"
    hider.mkdir()
    (hider / "sitecustomize.py").write_text("import sys\nsys.modules['torchft'] = None\n")
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(hider), os.environ.get("PYTHONPATH", "")])
    )
    assert_refused(
        tmp_path,
        write(tmp_path),
        "fault_tolerance: needs the torchft package, which is not installed",
        "pip install 'tenter[ft]'",
    )


def test_kubernetes_refuses_replica_groups_it_cannot_render_yet(tmp_path: Path) -> None:
    spec = write(tmp_path, backend="kubernetes", kubernetes={"image": "example.com/train:1"})
    done = tenter("plan", str(spec))
    assert done.returncode == ExitCode.BACKEND_REFUSED, done.stderr
    assert "fault_tolerance: kubernetes: replica groups" in done.stderr
    assert "Traceback" not in done.stderr
