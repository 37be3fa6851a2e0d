"""Accelerators: the GPUs this host gives the job, against the processes it starts per host."""

from __future__ import annotations

from collections import Counter

from tenter.doctor.result import Check, CheckResult, Context


def _describe(models: list[str]) -> str:
    if not models:
        return "no CUDA devices"
    return ", ".join(f"{n} x {model}" for model, n in Counter(models).items())


def _gpus(ctx: Context) -> CheckResult:
    models = ctx.system.gpus()
    found = _describe(models)
    job = ctx.job
    if job is None:
        return CheckResult.ok(found)
    itype = job.instance_type
    if itype.name == "local" or job.rehearsal:
        return CheckResult.ok(
            f"{found}; {itype.name} here: a GPU per rank where they fit, else the CPU"
        )
    if not job.gpu_job:
        return CheckResult.ok(f"{found}; {itype.name} is a CPU instance type")
    if len(models) < job.procs_per_host:
        return CheckResult.fail(
            f"{found}, but the job starts {job.procs_per_host} processes per host, one per GPU",
            f"run on a {itype.name} host, or set processes_per_host to at most {len(models)}",
        )
    if len(set(models)) > 1:
        return CheckResult.warn(
            f"{found}: mixed models, the slowest sets the pace",
            "set CUDA_VISIBLE_DEVICES to GPUs of one model",
        )
    if itype.gpu_model and models and itype.gpu_model not in models[0]:
        return CheckResult.warn(
            f"{found}, but {itype.name} has {itype.gpu_model} GPUs",
            f"check instance_type: this host is not a {itype.name}",
        )
    return CheckResult.ok(f"{found} for {job.procs_per_host} processes per host")


GPUS = Check(
    "gpus",
    "CUDA devices (NVML or the driver) against the job's processes per host",
    _gpus,
)
