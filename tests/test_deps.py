"""Optional dependencies: a missing or too old package stops a command before it does any work,
with the install command and exit code 5. The package is made unimportable in a subprocess
(a ``None`` entry in ``sys.modules``, Python's own way of blocking an import)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tenter.deps import MissingDependencyError, release, require
from tests.conftest import REPO, SCRIPTS

BLOCK_AND_RUN = (
    "import sys\n"
    "for name in filter(None, sys.argv[1].split(',')):\n"
    "    sys.modules[name] = None\n"
    "from tenter.cli.main import main\n"
    "sys.exit(main(sys.argv[2:]))\n"
)


def python(code: str, *args: str, pythonpath: str = "") -> subprocess.CompletedProcess[str]:
    """``python -c code args...``, with ``pythonpath`` searched first."""
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([pythonpath, env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env,
    )


def tenter_without(modules: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The ``tenter`` CLI with ``modules`` (comma-separated) unimportable."""
    return python(BLOCK_AND_RUN, modules, *args)


def test_scale_exits_5_before_running_anything_if_matplotlib_is_missing(
    tmp_path: Path, tenter_home: Path
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text(f"entry_point: contract.py\nsource_dir: {SCRIPTS}\n")
    done = tenter_without("matplotlib", "scale", str(spec), "--hosts", "1,2")
    assert done.returncode == 5
    assert done.stderr == "error: tenter scale: needs matplotlib. Fix: pip install 'tenter[plot]'\n"
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not tenter_home.exists()  # no job directory, no scale directory


def test_report_exits_5_if_matplotlib_is_missing(tenter_home: Path) -> None:
    done = tenter_without("matplotlib", "report", "some-job")
    assert done.returncode == 5
    assert (
        done.stderr == "error: tenter report: needs matplotlib. Fix: pip install 'tenter[plot]'\n"
    )
    assert not tenter_home.exists()


CHECK_METRICS = (
    "import sys\n"
    "for name in filter(None, sys.argv[1].split(',')):\n"
    "    sys.modules[name] = None\n"
    "from tenter.monitor.prometheus import check_metrics_dependency\n"
    "from tenter.deps import MissingDependencyError\n"
    "try:\n"
    "    check_metrics_dependency()\n"
    "except MissingDependencyError as e:\n"
    "    print(e.exit_code, e)\n"
    "else:\n"
    "    print('ok')\n"
)


def check_metrics(blocked: str, pythonpath: str = "") -> str:
    done = python(CHECK_METRICS, blocked, pythonpath=pythonpath)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_metrics_check_names_the_floor_if_prometheus_client_is_missing() -> None:
    assert check_metrics("prometheus_client") == (
        "5 tenter run --metrics-port: needs prometheus-client >= 0.20. Fix: pip install "
        "'tenter[monitor]'"
    )


def test_metrics_check_names_the_installed_version_if_it_is_too_old(tmp_path: Path) -> None:
    # An installed prometheus-client 0.17.1 (its start_http_server returns nothing), found
    # first on the path: a package folder and its distribution metadata, as pip lays them out.
    (tmp_path / "prometheus_client").mkdir()
    (tmp_path / "prometheus_client" / "__init__.py").write_text("")
    dist_info = tmp_path / "prometheus_client-0.17.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: prometheus_client\nVersion: 0.17.1\n"
    )
    assert check_metrics("", pythonpath=str(tmp_path)) == (
        "5 tenter run --metrics-port: needs prometheus-client >= 0.20 (0.17.1 is installed). "
        "Fix: pip install 'tenter[monitor]'"
    )


def test_metrics_check_passes_with_the_installed_prometheus_client() -> None:
    assert check_metrics("") == "ok"


@pytest.mark.parametrize(
    ("version", "numbers"),
    [("0.20.0", (0, 20, 0)), ("0.20.0rc1", (0, 20, 0)), ("3.7", (3, 7)), ("dev", ())],
)
def test_release_reads_the_numbers_of_a_version(version: str, numbers: tuple[int, ...]) -> None:
    assert release(version) == numbers


def test_require_raises_with_exit_code_5_naming_feature_and_extra() -> None:
    with pytest.raises(MissingDependencyError) as info:
        require("tenter_no_such_module", "plot", "tenter report")
    assert str(info.value) == (
        "tenter report: needs tenter_no_such_module. Fix: pip install 'tenter[plot]'"
    )
    assert info.value.exit_code == 5
