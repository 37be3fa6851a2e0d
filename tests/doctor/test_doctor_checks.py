"""Each check against the fake hosts in fixtures/: one healthy p4d, and one host per trap."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tenter.doctor import CHECKS, Check, CheckResult, JobContext, Status, System, run_checks
from tenter.doctor.checks import by_name
from tenter.spec import lookup
from tenter.spec.errors import FieldError

Host = Callable[..., System]


def job(
    itype: str,
    procs: int | None = None,
    hosts: tuple[str, ...] = ("ip-172-31-1-10", "ip-172-31-1-11"),
    simulated: bool = False,
    uses_mpi: bool = False,
) -> JobContext:
    found = lookup(itype)
    assert found is not None
    return JobContext(
        found, procs or max(1, found.gpus), hosts, simulated=simulated, uses_mpi=uses_mpi
    )


def check(name: str, system: System, job_context: JobContext | None = None) -> CheckResult:
    result = run_checks(system, job_context, by_name([name])).result(name)
    assert result is not None
    return result


P4D = job("ml.p4d.24xlarge", uses_mpi=True)


def test_run_checks_all_pass_if_p4d_host_is_set_up(host: Host) -> None:
    report = run_checks(host("p4d"), P4D)
    assert {o.check: o.result.status for o in report.outcomes} == {
        c.name: Status.PASS for c in CHECKS
    }
    assert report.result("gpus") == CheckResult.ok(
        "8 x NVIDIA A100-SXM4-40GB for 8 processes per host"
    )
    assert report.result("efa-devices") == CheckResult.ok(
        "4 EFA device(s) (rdmap144s27, rdmap160s27, rdmap16s27, rdmap32s27), 4 uverbs node(s)"
    )
    assert report.result("libfabric") == CheckResult.ok(
        "libfabric 1.22.0amzn4.0: providers efa, ofi_rxm, shm, tcp; efa present"
    )
    assert report.result("nccl") == CheckResult.ok(
        "NCCL 2.21.5 at /opt/nccl/lib/libnccl.so, as torch was built with"
    )
    assert report.result("ofi-nccl") == CheckResult.ok(
        "/opt/aws-ofi-nccl/lib/libnccl-net.so, /opt/aws-ofi-nccl/lib/libnccl-ofi-tuner.so"
    )
    assert report.result("hugepages") == CheckResult.ok("5128 x 2 MiB hugepages, 5120 free")
    assert report.result("shm") == CheckResult.ok("/dev/shm is 576.0 GiB, the job needs 2.0 GiB")
    assert report.result("memlock") == CheckResult.ok("memlock unlimited")
    assert report.result("mpirun") == CheckResult.ok(
        "/opt/amazon/openmpi/bin/mpirun: Open MPI 4.1.7"
    )


def test_fabric_env_fails_if_p3_16xlarge_sets_fi_provider_efa(host: Host) -> None:
    result = check("fabric-env", host("p3-efa-env"), job("ml.p3.16xlarge"))
    assert result.status is Status.FAIL
    assert result.found.startswith("FI_PROVIDER=efa, FI_EFA_USE_DEVICE_RDMA=1, but p3.16xlarge")
    assert result.found.endswith("has no EFA: NCCL hangs at init")
    assert result.remedy.startswith("unset FI_PROVIDER")


def test_fabric_env_fails_without_job_if_host_has_no_efa_and_fi_provider_efa(host: Host) -> None:
    result = check("fabric-env", host("p3-efa-env"))
    assert result.status is Status.FAIL
    assert "this host has no EFA" in result.found


def test_fabric_env_passes_if_p3_16xlarge_leaves_fi_provider_unset(host: Host) -> None:
    system = host("p3-efa-env", FI_PROVIDER=None, FI_EFA_USE_DEVICE_RDMA=None)
    assert check("fabric-env", system, job("ml.p3.16xlarge")).status is Status.PASS


def test_fabric_env_fails_if_device_rdma_is_set_on_an_instance_without_it(host: Host) -> None:
    result = check("fabric-env", host("p4d"), job("ml.g5.48xlarge"))
    assert result.status is Status.FAIL
    assert "no GPUDirect RDMA" in result.found


def test_fabric_env_warns_with_every_missing_setting_if_p4d_sets_none(host: Host) -> None:
    system = host("p4d", FI_PROVIDER=None, FI_EFA_USE_DEVICE_RDMA=None, RDMAV_FORK_SAFE=None)
    result = check("fabric-env", system, P4D)
    assert result.status is Status.WARN
    assert result.remedy == (
        "set FI_PROVIDER=efa FI_EFA_USE_DEVICE_RDMA=1 RDMAV_FORK_SAFE=1 in the job's environment"
    )


def test_libfabric_lists_every_provider_even_if_fi_provider_narrows_it(host: Host) -> None:
    result = check("libfabric", host("p4d", FI_PROVIDER="tcp"), P4D)
    assert result.status is Status.PASS
    assert "efa present" in result.found


def test_libfabric_fails_if_efa_instance_has_no_fi_info(host: Host) -> None:
    result = check("libfabric", host("p4d", PATH="/usr/bin:/bin"), P4D)
    assert result.status is Status.FAIL
    assert result.found == "fi_info not found on PATH: libfabric is not installed"


def test_efa_checks_fail_if_p4d_job_runs_on_a_host_without_efa(host: Host) -> None:
    report = run_checks(host("p3-efa-env"), job("ml.p4d.24xlarge", hosts=()))
    assert report.result("efa-devices") == CheckResult.fail(
        "0 EFA device(s), 0 uverbs node(s); p4d.24xlarge has 4 EFA interface(s)",
        "launch the instance with its EFA interfaces attached, and run the container with "
        "--device /dev/infiniband/uverbs0 (one per device) or --privileged",
    )
    assert {o.check for o in report.failed} == {"efa-devices", "libfabric"}


def test_libfabric_is_skipped_if_the_instance_type_has_no_efa(host: Host) -> None:
    assert check("libfabric", host("p4d"), job("ml.p3.16xlarge")).status is Status.SKIP


def test_nccl_fails_with_both_versions_if_loader_finds_another_nccl(host: Host) -> None:
    result = check("nccl", host("nccl-mismatch"), P4D)
    assert result == CheckResult.fail(
        "torch built with NCCL 2.21.5, but the loader finds /usr/local/nccl/lib/libnccl.so.2 "
        "(NCCL 2.18.3)",
        "install NCCL 2.21.5 there (`tenter container dockerfile` pins it) or remove "
        "/usr/local/nccl/lib from LD_LIBRARY_PATH",
    )


def test_nccl_passes_with_torchs_own_if_no_libnccl_is_on_the_loader_path(host: Host) -> None:
    result = check("nccl", host("nccl-mismatch", LD_LIBRARY_PATH=None), P4D)
    assert result.status is Status.PASS
    assert "torch's own NCCL 2.21.5" in result.found


def test_nccl_is_skipped_for_a_cpu_job(host: Host) -> None:
    assert check("nccl", host("nccl-mismatch"), job("ml.c5.18xlarge")).status is Status.SKIP


def test_shm_fails_if_docker_default_is_too_small_for_eight_gpu_processes(host: Host) -> None:
    result = check("shm", host("tiny-shm"), P4D)
    assert result == CheckResult.fail(
        "/dev/shm is 64 MiB; the job's 8 processes per host need 2.0 GiB",
        "run the container with --shm-size=2g (or remount /dev/shm larger)",
    )


def test_shm_warns_without_job_if_below_one_gib(host: Host) -> None:
    assert check("shm", host("tiny-shm")).status is Status.WARN


def test_shm_counts_every_simulated_host_on_this_machine(host: Host) -> None:
    cpu_job = job("ml.c5.18xlarge", procs=1, hosts=("a",), simulated=True)
    assert check("shm", host("tiny-shm"), cpu_job).status is Status.PASS
    two_hosts = job("ml.c5.18xlarge", procs=1, hosts=("a", "b"), simulated=True)
    assert "need 128 MiB" in check("shm", host("tiny-shm"), two_hosts).found


def test_gpus_fails_if_fewer_visible_gpus_than_processes(host: Host) -> None:
    result = check("gpus", host("p4d", CUDA_VISIBLE_DEVICES="0"), P4D)
    assert result.status is Status.FAIL
    assert result.found.startswith("1 x NVIDIA A100-SXM4-40GB, but the job starts 8 processes")


def test_gpus_warns_if_the_host_has_other_gpus_than_the_instance_type(host: Host) -> None:
    result = check("gpus", host("p3-efa-env"), P4D)
    assert result.status is Status.WARN
    assert "p4d.24xlarge has A100 GPUs" in result.found


def test_ofi_nccl_warns_if_the_plugin_is_not_on_the_loader_path(host: Host) -> None:
    result = check("ofi-nccl", host("p4d", LD_LIBRARY_PATH="/opt/nccl/lib"), P4D)
    assert result.status is Status.WARN
    assert "NCCL will use TCP sockets" in result.found


def test_interfaces_warns_if_multi_host_job_would_use_loopback(host: Host) -> None:
    system = host("p4d", GLOO_SOCKET_IFNAME="lo", NCCL_SOCKET_IFNAME="lo")
    result = check("interfaces", system, P4D)
    assert result.status is Status.WARN
    assert "gloo and NCCL would use loopback in a 2-host job" in result.found
    assert check("interfaces", system, job("ml.p4d.24xlarge", simulated=True)).status is (
        Status.PASS
    )


def test_interfaces_shows_nccl_skipping_docker_and_loopback(host: Host) -> None:
    system = host("p4d", GLOO_SOCKET_IFNAME=None, NCCL_SOCKET_IFNAME=None)
    result = check("interfaces", system)
    assert result.found.endswith(
        "gloo uses ens32 (hostname ip-172-31-1-10 -> 172.31.1.10), NCCL uses ens32"
    )


def test_socket_ifname_fails_if_gloo_names_a_missing_interface(host: Host) -> None:
    result = check("socket-ifname", host("p4d", GLOO_SOCKET_IFNAME="eth9"))
    assert result.status is Status.FAIL
    assert "no interface eth9 on this host (lo, ens32, docker0)" in result.found


def test_socket_ifname_warns_if_gloo_and_nccl_use_different_interfaces(host: Host) -> None:
    result = check("socket-ifname", host("p4d", NCCL_SOCKET_IFNAME="docker"))
    assert result.status is Status.WARN
    assert result.found.endswith("gloo uses ens32, NCCL uses docker0")


def test_host_resolution_fails_naming_the_host_that_does_not_resolve(host: Host) -> None:
    result = check("host-resolution", host("p4d"), job("ml.p4d.24xlarge", hosts=("algo-9",)))
    assert result.status is Status.FAIL
    assert result.remedy.startswith("make algo-9 resolvable")


def test_mpirun_fails_if_a_cluster_mpi_job_has_none(host: Host) -> None:
    result = check("mpirun", host("p3-efa-env"), job("ml.p3.16xlarge", uses_mpi=True))
    assert result.status is Status.FAIL
    simulated = job("ml.p3.16xlarge", uses_mpi=True, simulated=True)
    assert check("mpirun", host("p3-efa-env"), simulated).status is Status.WARN
    assert check("mpirun", host("p3-efa-env"), job("ml.p3.16xlarge")).status is Status.SKIP


def test_run_checks_turns_a_crashing_check_into_a_warning(host: Host) -> None:
    def broken(_: object) -> CheckResult:
        raise KeyError("boom")

    report = run_checks(host("p4d"), None, (Check("broken", "raises", broken),))
    result = report.result("broken")
    assert result is not None and result.status is Status.WARN
    assert result.found.startswith("the check crashed: KeyError: 'boom'")


def test_by_name_raises_listing_known_checks_if_a_name_is_unknown() -> None:
    with pytest.raises(FieldError, match=r"^unknown check\(s\) gpu$") as raised:
        by_name(["gpu"])
    assert raised.value.fix.startswith("choose from: versions, nccl")


def test_checks_have_unique_names_and_descriptions() -> None:
    assert len({c.name for c in CHECKS}) == len(CHECKS)
    assert all(c.description for c in CHECKS)
