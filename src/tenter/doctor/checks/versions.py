"""Software versions: Python, torch and its CUDA/cuDNN, and the NCCL the process will load."""

from __future__ import annotations

import platform
from pathlib import Path

from tenter.doctor.result import Check, CheckResult, Context
from tenter.doctor.system import System, TorchBuild


def _versions(ctx: Context) -> CheckResult:
    build = ctx.system.torch
    if build.version is None:
        return CheckResult.fail(
            f"Python {platform.python_version()}, torch not installed",
            "pip install torch (tenter needs torch>=2.7,<2.16)",
        )
    found = (
        f"Python {platform.python_version()}, torch {build.version}, "
        f"CUDA runtime {build.cuda or 'none'}, cuDNN {build.cudnn or 'none'}"
    )
    job = ctx.job
    if job is not None and job.gpu_job and build.cuda is None:
        return CheckResult.fail(
            f"{found}: a CPU-only torch for a {job.instance_type.name} job",
            "install a CUDA build of torch (tenter container dockerfile --torch ... pins one)",
        )
    return CheckResult.ok(found)


def torch_preloaded_nccl(system: System, cuda: str) -> Path | None:
    """The libnccl of pip's ``nvidia-nccl-cu<N>`` package that torch loads, if installed.

    torch's CUDA wheels take NCCL from that package, never from the loader path: their
    libraries' RPATH names ``site-packages/nvidia/nccl/lib``, and ``import torch`` preloads it
    from the first ``sys.path`` entry that has one (torch/__init__.py, ``_preload_cuda_deps``
    and ``_get_cuda_dep_paths``). Searched here as torch searches: per ``sys.path`` entry,
    ``nvidia/nccl/lib``, then ``nvidia/cu<major>/lib`` (CUDA 13 wheels), then ``nccl/lib``.
    """
    folders = ("nvidia/nccl/lib", f"nvidia/cu{cuda.split('.')[0]}/lib", "nccl/lib")
    for entry in system.python_path:
        for folder in folders:
            found = system.glob(f"{entry}/{folder}/libnccl.so.*[0-9]")
            if found:
                return found[0]
    return None


def _pip_nccl(system: System, build: TorchBuild, library: Path) -> CheckResult:
    where = system.display(library)
    version = system.nccl_version(library)
    shadowed = [p for p in system.find_libraries("libnccl.so*") if p.resolve() != library.resolve()]
    aside = f" ({system.display(shadowed[0])} on the loader path is not used)" if shadowed else ""
    package = f"nvidia-nccl-cu{(build.cuda or '').split('.')[0]}"
    if version == build.nccl:
        return CheckResult.ok(f"NCCL {version} from pip's {package} at {where}{aside}")
    # A warning, not a failure: upgrading that package is how NVIDIA ships NCCL fixes to
    # torch users, and torch runs with it; only an unintended change is a problem.
    found = f"NCCL {version}" if version else "an NCCL of unknown version"
    return CheckResult.warn(
        f"torch built with NCCL {build.nccl} loads {found} from pip's {package} at {where}",
        f"if that is not on purpose: pip install {package}=={build.nccl}",
    )


def _nccl(ctx: Context) -> CheckResult:
    job = ctx.job
    if job is not None and not job.gpu_job:
        return CheckResult.skip(f"{job.instance_type.name} has no GPUs: NCCL is not used")
    build = ctx.system.torch
    if build.nccl is None or build.cuda is None:
        return CheckResult.skip("torch is built without CUDA: no NCCL")
    pip_library = torch_preloaded_nccl(ctx.system, build.cuda)
    if pip_library is not None:
        return _pip_nccl(ctx.system, build, pip_library)
    libraries = ctx.system.find_libraries("libnccl.so*")
    if not libraries:
        return CheckResult.ok(
            f"torch's own NCCL {build.nccl} (no libnccl.so on the loader path to shadow it)"
        )
    loaded = libraries[0]
    version = ctx.system.nccl_version(loaded)
    where = ctx.system.display(loaded)
    if version is None:
        return CheckResult.warn(
            f"torch built with NCCL {build.nccl}; the loader finds {where}, of unknown version",
            f"make sure {where} is NCCL {build.nccl}, or remove its folder from LD_LIBRARY_PATH",
        )
    if version != build.nccl:
        return CheckResult.fail(
            f"torch built with NCCL {build.nccl}, but the loader finds {where} (NCCL {version})",
            f"install NCCL {build.nccl} there (`tenter container dockerfile` pins it) or remove "
            f"{where.rsplit('/', 1)[0]} from LD_LIBRARY_PATH",
        )
    return CheckResult.ok(f"NCCL {version} at {where}, as torch was built with")


VERSIONS = Check(
    "versions",
    "Python, torch, CUDA runtime and cuDNN versions",
    _versions,
    # Informational and it imports torch: the GPU-job case it fails is also a GPU count problem.
    preflight=False,
)
NCCL = Check(
    "nccl",
    "torch's NCCL version equals the libnccl it will load (pip's nvidia-nccl, else the loader's)",
    _nccl,
)
