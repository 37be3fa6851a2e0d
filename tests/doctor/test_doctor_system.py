"""System: the reads every check goes through, on fake roots built in each test."""

from __future__ import annotations

from pathlib import Path

from tenter.doctor import JobContext, Status, System, run_checks
from tenter.doctor.checks import by_name
from tenter.doctor.system import DEFAULT_LIBRARY_DIRS, Limit
from tenter.spec import lookup

P4D_TYPE = lookup("p4d.24xlarge")
assert P4D_TYPE is not None
P4D = JobContext(P4D_TYPE, 8)


def write(root: Path, path: str, text: str) -> Path:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)
    return target


def status(check: str, system: System, job: JobContext | None = P4D) -> Status:
    result = run_checks(system, job, by_name([check])).result(check)
    assert result is not None
    return result.status


LIMITS = """\
Limit                     Soft Limit           Hard Limit           Units
Max open files            1024                 524288               files
Max locked memory         65536                65536                bytes
"""


def test_limits_parses_numbers_and_unlimited(tmp_path: Path) -> None:
    write(
        tmp_path,
        "/proc/self/limits",
        LIMITS.replace("65536                65536", "unlimited unlimited"),
    )
    limits = System(tmp_path, {}).limits()
    assert limits == {"Max open files": Limit(1024, 524288), "Max locked memory": Limit(None, None)}


def test_memlock_fails_for_efa_if_limited_and_passes_without_efa(tmp_path: Path) -> None:
    write(tmp_path, "/proc/self/limits", LIMITS)
    system = System(tmp_path, {})
    result = run_checks(system, P4D, by_name(["memlock"])).result("memlock")
    assert result is not None and result.status is Status.FAIL
    assert result.found.startswith("memlock 64 KiB: EFA registers")
    cpu = lookup("c5.18xlarge")
    assert cpu is not None
    assert status("memlock", system, JobContext(cpu, 1)) is Status.PASS


def test_open_files_warns_below_the_minimum(tmp_path: Path) -> None:
    write(tmp_path, "/proc/self/limits", LIMITS)
    assert status("open-files", System(tmp_path, {})) is Status.WARN


def test_hugepages_warns_for_efa_if_none_reserved_or_none_free(tmp_path: Path) -> None:
    base = "/sys/kernel/mm/hugepages/hugepages-2048kB"
    write(tmp_path, f"{base}/nr_hugepages", "0\n")
    write(tmp_path, f"{base}/free_hugepages", "0\n")
    system = System(tmp_path, {})
    assert status("hugepages", system) is Status.WARN
    assert status("hugepages", System(tmp_path, {"FI_EFA_USE_HUGE_PAGE": "0"})) is Status.PASS
    write(tmp_path, f"{base}/nr_hugepages", "5128\n")
    result = run_checks(system, P4D, by_name(["hugepages"])).result("hugepages")
    assert result is not None
    assert result.remedy == "reserve more: sysctl -w vm.nr_hugepages=10256"


def test_shm_fails_if_dev_shm_is_not_mounted(tmp_path: Path) -> None:
    write(tmp_path, "/proc/self/mounts", "overlay / overlay rw 0 0\n")
    assert System(tmp_path, {}).mount_size("/dev/shm") is None
    assert status("shm", System(tmp_path, {})) is Status.FAIL


def test_mount_size_reads_statvfs_if_the_mount_has_no_size_option(tmp_path: Path) -> None:
    write(tmp_path, "/proc/self/mounts", "tmpfs /dev/shm tmpfs rw,nosuid 0 0\n")
    (tmp_path / "dev" / "shm").mkdir(parents=True)
    size = System(tmp_path, {}).mount_size("/dev/shm")
    assert size is not None and size > 0


def test_library_dirs_follow_ld_library_path_then_ld_so_conf_includes(tmp_path: Path) -> None:
    write(tmp_path, "/etc/ld.so.conf", "include /etc/ld.so.conf.d/*.conf\n/opt/last # comment\n")
    write(tmp_path, "/etc/ld.so.conf.d/b.conf", "/opt/b\n")
    write(tmp_path, "/etc/ld.so.conf.d/a.conf", "/opt/a\ninclude /etc/ld.so.conf\n")
    system = System(tmp_path, {"LD_LIBRARY_PATH": "/opt/first::/opt/a/"})
    assert system.library_dirs() == [
        "/opt/first",
        "/opt/a",
        "/opt/b",
        "/opt/last",
        *DEFAULT_LIBRARY_DIRS,
    ]


def test_which_finds_only_executables_on_path_under_the_root(tmp_path: Path) -> None:
    plain = write(tmp_path, "/opt/x/bin/fi_info", "#!/bin/sh\necho plain\n")
    system = System(tmp_path, {"PATH": "/opt/x/bin"})
    assert system.which("fi_info") is None
    plain.chmod(0o755)
    assert system.which("fi_info") == plain
    out = system.run(["fi_info"])
    assert out is not None and out.stdout == "plain\n"
    assert system.run(["mpirun"]) is None


def test_nccl_version_reads_the_embedded_string_across_a_chunk_boundary(tmp_path: Path) -> None:
    lib = tmp_path / "libnccl.so.2"
    lib.write_bytes(b"\0" * (16 * 2**20 - 5) + b"NCCL version 2.27.3+cuda12.9")
    assert System(tmp_path, {}).nccl_version(lib) == "2.27.3"
    (tmp_path / "libnccl.so.1").write_bytes(b"no version here")
    assert System(tmp_path, {}).nccl_version(tmp_path / "libnccl.so.1") is None


def test_gpus_apply_cuda_visible_devices(tmp_path: Path) -> None:
    for i, model in enumerate(["A", "B", "C"]):
        write(tmp_path, f"/proc/driver/nvidia/gpus/0000:0{i}:00.0/information", f"Model: {model}\n")
    assert System(tmp_path, {}).gpus() == ["A", "B", "C"]
    assert System(tmp_path, {"CUDA_VISIBLE_DEVICES": "2,0"}).gpus() == ["C", "A"]
    assert System(tmp_path, {"CUDA_VISIBLE_DEVICES": "GPU-x"}).gpus() == ["A"]
    assert System(tmp_path, {"CUDA_VISIBLE_DEVICES": ""}).gpus() == []
