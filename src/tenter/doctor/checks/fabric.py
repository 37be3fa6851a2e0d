"""Fabric: EFA devices, libfabric's providers, the aws-ofi-nccl plugin, and the FI_*/NCCL_*
settings, judged against what the instance type offers.

The two hangs these catch: an EFA instance whose container has no ``efa`` provider (NCCL's
OFI plugin stops with "NET/OFI Only EFA provider is supported"), and ``FI_PROVIDER=efa`` on an
instance without EFA (p3.16xlarge), where NCCL waits forever for a device that is not there.
"""

from __future__ import annotations

import re
from pathlib import Path

from tenter.doctor.result import Check, CheckResult, Context, rehearsed
from tenter.doctor.system import System

_PROVIDER_LINE = re.compile(r"^provider:\s*(\S+)", re.MULTILINE)
_LIBFABRIC_VERSION = re.compile(r"^libfabric:\s*(\S+)", re.MULTILINE)
_RDMA_ENV = ("FI_PROVIDER", "FI_EFA_USE_DEVICE_RDMA", "RDMAV_FORK_SAFE")


def parse_fi_info(text: str) -> list[str]:
    """Provider names in ``fi_info`` output, sorted; layered entries (``tcp;ofi_rxm``) count
    each layer."""
    names = {part for entry in _PROVIDER_LINE.findall(text) for part in entry.split(";")}
    return sorted(names)


def efa_devices(system: System) -> tuple[list[str], list[str]]:
    """(uverbs device nodes, InfiniBand devices whose driver is efa)."""
    uverbs = [p.name for p in system.glob("/dev/infiniband/uverbs*")]
    efa = []
    for device in system.glob("/sys/class/infiniband/*"):
        uevent = system.read(f"/sys/class/infiniband/{device.name}/device/uevent") or ""
        if "DRIVER=efa" in uevent.splitlines():
            efa.append(device.name)
    return uverbs, efa


def _expects_efa(ctx: Context) -> bool:
    """The job's instance type has EFA; without a job, the host's own devices say so."""
    if ctx.job is not None:
        return ctx.job.efa
    return bool(efa_devices(ctx.system)[1])


def _efa_devices(ctx: Context) -> CheckResult:
    uverbs, efa = efa_devices(ctx.system)
    names = f" ({', '.join(efa)})" if efa else ""
    found = f"{len(efa)} EFA device(s){names}, {len(uverbs)} uverbs node(s)"
    job = ctx.job
    if job is None or not job.efa:
        return CheckResult.ok(found if efa or uverbs else "no EFA devices")
    want = job.instance_type.efa
    if not efa or not uverbs:
        return CheckResult.fail(
            f"{found}; {job.instance_type.name} has {want} EFA interface(s)",
            "launch the instance with its EFA interfaces attached, and run the container with "
            "--device /dev/infiniband/uverbs0 (one per device) or --privileged",
        )
    if len(efa) < want:
        return CheckResult.warn(
            f"{found}; {job.instance_type.name} has {want}: bandwidth is reduced",
            "attach every EFA interface of the instance and pass every uverbs device through",
        )
    return CheckResult.ok(found)


def _libfabric(ctx: Context) -> CheckResult:
    if ctx.job is not None and not ctx.job.efa:
        # fi_info takes a third of a second per call: not worth it for a job that never uses it.
        return CheckResult.skip(f"{ctx.job.instance_type.name} has no EFA: libfabric is not used")
    needed = _expects_efa(ctx)
    # FI_PROVIDER narrows fi_info's list to itself: unset it to see every usable provider
    # (whether FI_PROVIDER itself fits is the fabric-env check's question).
    listing = ctx.system.run(["fi_info"], unset=("FI_PROVIDER",))
    if listing is None:
        if needed:
            return CheckResult.fail(
                "fi_info not found on PATH: libfabric is not installed",
                "install the EFA software (aws-efa-installer), e.g. from `tenter container "
                "dockerfile`, and put /opt/amazon/efa/bin on PATH",
            )
        return CheckResult.ok("fi_info not found; libfabric is not needed without EFA")
    version_out = ctx.system.run(["fi_info", "--version"])
    match = _LIBFABRIC_VERSION.search(version_out.stdout if version_out else "")
    version = match.group(1) if match else "unknown version"
    providers = parse_fi_info(listing.stdout)
    efa = "efa" in providers
    found = (
        f"libfabric {version}: providers {', '.join(providers) or 'none'}; "
        f"efa {'present' if efa else 'absent'}"
    )
    if needed and not efa:
        return CheckResult.fail(
            found,
            "install the AWS build of libfabric (aws-efa-installer) and check `fi_info -p efa`",
        )
    return CheckResult.ok(found)


def _plugin_files(system: System) -> list[Path]:
    return system.find_libraries("libnccl-net*.so*") + system.find_libraries(
        "libnccl-ofi-tuner.so*"
    )


def _ofi_nccl(ctx: Context) -> CheckResult:
    files = _plugin_files(ctx.system)
    found = (
        ", ".join(ctx.system.display(p) for p in files) or "no libnccl-net*.so on the loader path"
    )
    job = ctx.job
    needed = _expects_efa(ctx) and (job is None or job.gpu_job)
    if needed and not any(p.name.startswith("libnccl-net") for p in files):
        return CheckResult.warn(
            f"{found}: NCCL will use TCP sockets instead of EFA, several times slower",
            "build aws-ofi-nccl (`tenter container dockerfile` does) and add its lib folder "
            "to LD_LIBRARY_PATH",
        )
    return CheckResult.ok(found)


def _fabric_env(ctx: Context) -> CheckResult:
    env = ctx.system.env
    shown = [f"{k}={env[k]}" for k in _RDMA_ENV if k in env]
    shown += sorted(f"{k}={v}" for k, v in env.items() if k.startswith("NCCL_"))
    found = ", ".join(shown) or "no FI_*/RDMAV_*/NCCL_* settings"
    efa = _expects_efa(ctx)
    where = ctx.job.instance_type.name if ctx.job else "this host"
    provider = env.get("FI_PROVIDER")
    if provider == "efa" and not efa:
        return CheckResult.fail(
            f"{found}, but {where} has no EFA: NCCL hangs at init",
            "unset FI_PROVIDER (and FI_EFA_*) for instance types without EFA",
        )
    if not efa:
        return CheckResult.ok(found)
    if provider not in (None, "efa"):
        return CheckResult.warn(
            f"{found}: FI_PROVIDER={provider} on an EFA instance bypasses EFA",
            "set FI_PROVIDER=efa",
        )
    rdma = ctx.job.instance_type.gpu_rdma if ctx.job else None
    if env.get("FI_EFA_USE_DEVICE_RDMA") == "1" and rdma is False:
        return CheckResult.fail(
            f"{found}: FI_EFA_USE_DEVICE_RDMA=1, but {where} has no GPUDirect RDMA",
            "unset FI_EFA_USE_DEVICE_RDMA (only p4d/p4de/p5 support it)",
        )
    advice = []
    if provider is None:
        advice.append("FI_PROVIDER=efa")
    if rdma and env.get("FI_EFA_USE_DEVICE_RDMA") != "1":
        advice.append("FI_EFA_USE_DEVICE_RDMA=1")
    if env.get("RDMAV_FORK_SAFE") != "1":
        # DataLoader workers fork; without it a child can corrupt registered memory.
        advice.append("RDMAV_FORK_SAFE=1")
    if advice:
        return CheckResult.warn(found, f"set {' '.join(advice)} in the job's environment")
    return CheckResult.ok(found)


EFA_DEVICES = Check(
    "efa-devices",
    "EFA devices (/sys/class/infiniband with the efa driver, /dev/infiniband/uverbs*)",
    rehearsed(_efa_devices),
)
LIBFABRIC = Check(
    "libfabric",
    "libfabric's fi_info and its providers (efa where the instance type has EFA)",
    rehearsed(_libfabric),
)
OFI_NCCL = Check(
    "ofi-nccl",
    "the aws-ofi-nccl plugin (libnccl-net*.so, libnccl-ofi-tuner.so) on the loader path",
    _ofi_nccl,
)
FABRIC_ENV = Check(
    "fabric-env",
    "FI_PROVIDER, FI_EFA_USE_DEVICE_RDMA, RDMAV_FORK_SAFE, NCCL_* against the instance type",
    _fabric_env,
)
