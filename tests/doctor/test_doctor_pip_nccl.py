"""The NCCL check finds the libnccl of pip's nvidia-nccl package as torch does, ahead of the
loader path: a pip install with an older NCCL on LD_LIBRARY_PATH is healthy."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tenter.doctor import CheckResult, JobContext, Status, System, run_checks
from tenter.doctor.checks import by_name
from tenter.doctor.checks.versions import torch_preloaded_nccl
from tenter.doctor.system import TorchBuild
from tenter.spec import lookup

Host = Callable[..., System]
CU124 = TorchBuild(version="2.5.1+cu124", cuda="12.4", cudnn="9.1.0", nccl="2.21.5")
SITE = "/venv/lib/python3.11/site-packages"


def nccl_check(system: System) -> CheckResult:
    itype = lookup("ml.p4d.24xlarge")
    assert itype is not None
    result = run_checks(system, JobContext(itype, 8, ("a", "b")), by_name(["nccl"])).result("nccl")
    assert result is not None
    return result


def library(root: Path, path: str, version: str) -> None:
    """A stand-in libnccl: NCCL's embedded version string is all the check reads."""
    (root / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
    (root / path.lstrip("/")).write_text(f"... NCCL version {version}+cuda12.4 ...")


def test_nccl_passes_with_pips_nccl_if_the_loader_path_has_an_older_one(host: Host) -> None:
    assert nccl_check(host("pip-nccl")) == CheckResult.ok(
        "NCCL 2.21.5 from pip's nvidia-nccl-cu12 at "
        "/opt/venv/lib/python3.11/site-packages/nvidia/nccl/lib/libnccl.so.2 "
        "(/usr/local/nccl/lib/libnccl.so.2 on the loader path is not used)"
    )


def test_nccl_checks_the_loader_path_if_pips_nccl_is_not_on_the_python_path(host: Host) -> None:
    system = host("pip-nccl")
    system.python_path = ["/usr/lib/python311.zip"]
    assert nccl_check(system).status is Status.FAIL


def test_nccl_warns_with_the_pin_if_pips_nccl_is_another_version(tmp_path: Path) -> None:
    library(tmp_path, f"{SITE}/nvidia/nccl/lib/libnccl.so.2", "2.23.4")
    result = nccl_check(System(tmp_path, {}, torch=CU124, python_path=[SITE]))
    assert result == CheckResult.warn(
        "torch built with NCCL 2.21.5 loads NCCL 2.23.4 from pip's nvidia-nccl-cu12 at "
        f"{SITE}/nvidia/nccl/lib/libnccl.so.2",
        "if that is not on purpose: pip install nvidia-nccl-cu12==2.21.5",
    )


def test_preloaded_nccl_is_the_first_python_path_entry_that_has_one(tmp_path: Path) -> None:
    library(tmp_path, "/user/site/nvidia/nccl/lib/libnccl.so.2", "2.21.5")
    library(tmp_path, f"{SITE}/nvidia/nccl/lib/libnccl.so.2", "2.21.5")
    system = System(tmp_path, {}, python_path=["/empty", "/user/site", SITE])
    found = torch_preloaded_nccl(system, "12.4")
    assert found == tmp_path / "user/site/nvidia/nccl/lib/libnccl.so.2"


def test_preloaded_nccl_is_found_in_the_cuda_13_wheel_layout(tmp_path: Path) -> None:
    # CUDA 13 wheels put every library in one nvidia/cu13/lib folder.
    library(tmp_path, f"{SITE}/nvidia/cu13/lib/libnccl.so.2", "2.27.7")
    system = System(tmp_path, {}, python_path=[SITE])
    assert torch_preloaded_nccl(system, "13.0") == tmp_path / SITE.lstrip("/") / (
        "nvidia/cu13/lib/libnccl.so.2"
    )
    assert torch_preloaded_nccl(system, "12.4") is None
