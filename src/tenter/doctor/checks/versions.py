"""Software versions: Python, torch and its CUDA/cuDNN, and the NCCL the process will load."""

from __future__ import annotations

import platform

from tenter.doctor.result import Check, CheckResult, Context


def _versions(ctx: Context) -> CheckResult:
    build = ctx.system.torch
    if build.version is None:
        return CheckResult.fail(
            f"Python {platform.python_version()}, torch not installed",
            "pip install torch (tenter needs torch>=2.5)",
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


def _nccl(ctx: Context) -> CheckResult:
    job = ctx.job
    if job is not None and not job.gpu_job:
        return CheckResult.skip(f"{job.instance_type.name} has no GPUs: NCCL is not used")
    build = ctx.system.torch
    if build.nccl is None:
        return CheckResult.skip("torch is built without CUDA: no NCCL")
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
    "torch's NCCL version equals the libnccl the loader would load",
    _nccl,
)
