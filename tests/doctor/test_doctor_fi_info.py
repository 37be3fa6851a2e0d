"""The real fi_info of Debian's libfabric-bin (scripts/install-system-deps.sh installs it):
its providers parsed, efa absent, and a job on an EFA instance type failed for it."""

from __future__ import annotations

import shutil
import subprocess

from tenter.doctor import JobContext, Status, System, run_checks
from tenter.doctor.checks import by_name
from tenter.doctor.checks.fabric import parse_fi_info
from tenter.spec import lookup

FI_INFO = shutil.which("fi_info")
INSTALL = "fi_info is missing: run scripts/install-system-deps.sh (Debian's libfabric-bin)"


def test_parse_fi_info_finds_tcp_and_shm_but_no_efa_in_real_output() -> None:
    assert FI_INFO is not None, INSTALL
    out = subprocess.run([FI_INFO], capture_output=True, text=True, check=False, timeout=60).stdout
    providers = parse_fi_info(out)
    assert {"tcp", "shm", "ofi_rxm"} <= set(providers)
    assert "efa" not in providers
    assert not any(";" in p for p in providers)


def test_libfabric_reports_real_providers_and_fails_an_efa_job() -> None:
    assert FI_INFO is not None, INSTALL
    # FI_PROVIDER=efa would empty fi_info's list: the check must unset it to see the rest.
    system = System(env={"PATH": "/usr/bin:/bin", "FI_PROVIDER": "efa"})
    host = run_checks(system, None, by_name(["libfabric"])).result("libfabric")
    assert host is not None and host.status is Status.PASS
    assert host.found.startswith("libfabric 1.")
    assert "tcp" in host.found and "shm" in host.found
    assert host.found.endswith("efa absent")
    p4d = lookup("ml.p4d.24xlarge")
    assert p4d is not None
    job = run_checks(system, JobContext(p4d, 8), by_name(["libfabric"])).result("libfabric")
    assert job is not None and job.status is Status.FAIL
