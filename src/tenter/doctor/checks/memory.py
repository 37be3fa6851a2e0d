"""Memory and limits: hugepages, /dev/shm, locked memory and open files."""

from __future__ import annotations

from tenter.doctor.result import Check, CheckResult, Context, JobContext, rehearsed

MiB = 2**20
GiB = 2**30
EFA_HUGEPAGES = 5128
"""2 MiB pages the EFA installer reserves (vm.nr_hugepages) for libfabric's buffers."""
SHM_PER_GPU_PROCESS = 256 * MiB
"""/dev/shm a GPU process needs: NCCL's shared-memory transport maps buffers per local peer
there, and DataLoader workers pass batches through it. Below this NCCL fails with
"unhandled system error" and DataLoader with "Bus error" (Docker's default is 64 MiB)."""
SHM_PER_CPU_PROCESS = 64 * MiB
"""/dev/shm a CPU process needs: DataLoader workers' batches."""
SHM_RECOMMENDED = 1 * GiB
OPEN_FILES_MULTI_HOST = 65536
"""Each rank holds sockets to its peers (gloo, NCCL bootstrap) besides its files."""
OPEN_FILES_MIN = 4096


def _mib(n: int) -> str:
    if n >= GiB:
        return f"{n / GiB:.1f} GiB"
    return f"{n // MiB} MiB" if n >= MiB else f"{n // 2**10} KiB"


def _hugepages(ctx: Context) -> CheckResult:
    base = "/sys/kernel/mm/hugepages/hugepages-2048kB"
    total_text, free_text = (
        ctx.system.read(f"{base}/nr_hugepages"),
        ctx.system.read(f"{base}/free_hugepages"),
    )
    if total_text is None or free_text is None:
        return CheckResult.skip("no 2 MiB hugepage support in this kernel")
    total, free = int(total_text), int(free_text)
    found = f"{total} x 2 MiB hugepages, {free} free"
    wants = ctx.job.efa if ctx.job else False
    if not wants or ctx.system.env.get("FI_EFA_USE_HUGE_PAGE") == "0":
        return CheckResult.ok(found)
    if total == 0:
        return CheckResult.warn(
            f"{found}: libfabric's EFA buffers fall back to regular pages",
            f"reserve them on the host: sysctl -w vm.nr_hugepages={EFA_HUGEPAGES}",
        )
    if free == 0:
        return CheckResult.warn(
            f"{found}: all in use, libfabric falls back to regular pages",
            f"reserve more: sysctl -w vm.nr_hugepages={total + EFA_HUGEPAGES}",
        )
    return CheckResult.ok(found)


def shm_needed(job: JobContext) -> int:
    """Bytes of /dev/shm the job's processes on one machine need."""
    per_process = SHM_PER_GPU_PROCESS if job.gpu_job else SHM_PER_CPU_PROCESS
    # Simulated hosts all share this machine's /dev/shm.
    machines_hosts = max(1, len(job.hosts)) if job.simulated else 1
    return per_process * job.procs_per_host * machines_hosts


def _shm(ctx: Context) -> CheckResult:
    size = ctx.system.mount_size("/dev/shm")
    if size is None:
        return CheckResult.fail(
            "/dev/shm is not mounted", "mount a tmpfs at /dev/shm (docker run --shm-size=...)"
        )
    found = f"/dev/shm is {_mib(size)}"
    if ctx.job is None:
        if size < SHM_RECOMMENDED:
            return CheckResult.warn(
                found, f"give the container at least {_mib(SHM_RECOMMENDED)}: --shm-size=1g"
            )
        return CheckResult.ok(found)
    need = shm_needed(ctx.job)
    if size < need:
        return CheckResult.fail(
            f"{found}; the job's {ctx.job.procs_per_host} processes per host need {_mib(need)}",
            f"run the container with --shm-size={-(-need // GiB)}g (or remount /dev/shm larger)",
        )
    return CheckResult.ok(f"{found}, the job needs {_mib(need)}")


def _memlock(ctx: Context) -> CheckResult:
    limit = ctx.system.limits().get("Max locked memory")
    if limit is None:
        return CheckResult.skip("/proc/self/limits has no locked-memory limit")
    found = "memlock unlimited" if limit.soft is None else f"memlock {_mib(limit.soft)}"
    if ctx.job is None or not ctx.job.efa or limit.soft is None:
        return CheckResult.ok(found)
    return CheckResult.fail(
        f"{found}: EFA registers (locks) the job's buffers and fails past the limit",
        "run with unlimited locked memory: docker run --ulimit memlock=-1 (ulimit -l unlimited)",
    )


def _open_files(ctx: Context) -> CheckResult:
    limit = ctx.system.limits().get("Max open files")
    if limit is None:
        return CheckResult.skip("/proc/self/limits has no open-files limit")
    found = "open files unlimited" if limit.soft is None else f"open files {limit.soft}"
    multi_host = ctx.job is not None and len(ctx.job.hosts) > 1 and not ctx.job.simulated
    want = OPEN_FILES_MULTI_HOST if multi_host else OPEN_FILES_MIN
    if limit.soft is not None and limit.soft < want:
        return CheckResult.warn(
            f"{found}, below {want}",
            f"raise it: ulimit -n {want} (docker run --ulimit nofile={want}:{want})",
        )
    return CheckResult.ok(found)


HUGEPAGES = Check(
    "hugepages", "2 MiB hugepages reserved for libfabric on EFA instances", _hugepages
)
SHM = Check("shm", "/dev/shm size against what the job's processes need", _shm)
MEMLOCK = Check(
    "memlock", "locked-memory limit (ulimit -l): unlimited for EFA", rehearsed(_memlock)
)
OPEN_FILES = Check("open-files", "open-files limit (ulimit -n)", _open_files)
