"""The doctor on every host of a running isolated job (``tenter doctor --job JOB``).

Each host of a job run with ``isolation: network`` has its own network namespace, hostname
and ``/dev/shm``: the checks must run *inside* it to see what the job's processes see. This
module runs them there (``python -m tenter.doctor.across PLAN HOST_INDEX [CHECK...]`` through
the host's ``nsenter`` prefix, with the host's environment), each probe sending back its
:class:`~tenter.doctor.result.HostReport` and the host's :class:`HostFacts`; then
:mod:`tenter.doctor.reach` checks that every host reaches every other on the interface gloo
picks, and that verdict joins each host's report as one more check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from tenter.contract.plan import Plan
from tenter.doctor import reach
from tenter.doctor.checks import CHECKS, by_name
from tenter.doctor.checks.network import gloo_interfaces
from tenter.doctor.result import Check, HostReport, JobContext, Outcome
from tenter.doctor.runner import run_checks
from tenter.doctor.system import System
from tenter.errors import TenterError
from tenter.jobdir import layout
from tenter.launch.launcher.isolation.network import HostNetwork
from tenter.spec import lookup

PROBE_TIMEOUT_S = 120.0
"""A host's checks import torch and run a few tools: seconds on a loaded machine."""
PER_HOST_VALUES = frozenset({"interfaces", "host-resolution", reach.NAME})
"""Checks whose finding names the host's own name or address: isolated hosts differ there
by design, so the matrix compares them by status alone."""


@dataclass(frozen=True)
class HostFacts:
    """What a host looks like from inside: the values the per-host matrix shows."""

    host: str
    hostname: str
    interfaces: dict[str, list[str]]
    """Interface -> its IPv4 addresses (every interface, those without one too)."""
    chosen: str
    """The interface gloo binds to on this host (GLOO_SOCKET_IFNAME, else the hostname's)."""

    @property
    def chosen_addr(self) -> str | None:
        addrs = self.interfaces.get(self.chosen, [])
        return addrs[0] if addrs else None


@dataclass(frozen=True)
class JobDoctor:
    """Every host's report (the reachability check included), facts, and the pair matrix."""

    reports: list[HostReport]
    facts: list[HostFacts]
    reachability: reach.Reachability


def isolated_context(plan: Plan) -> JobContext:
    """The job as the checks judge it: hosts with a network of their own (not simulated on
    loopback), reached at their planned addresses."""
    itype = lookup(plan.instance_type)
    assert itype is not None, "a planned job's instance type is in the catalog"
    return JobContext(
        instance_type=itype,
        procs_per_host=plan.procs_per_host,
        hosts=tuple(h.addr for h in plan.hosts),
        simulated=False,
        uses_mpi=plan.backend == "mpi",
    )


def probe_host(plan: Plan, index: int, checks: tuple[Check, ...]) -> dict[str, object]:
    """Run inside host ``index``: its report and its facts, as JSON-ready data."""
    host = plan.hosts[index]
    system = System()
    report = run_checks(system, isolated_context(plan), checks, host=host.name)
    gloo, _ = gloo_interfaces(system)
    facts = HostFacts(
        host=host.name,
        hostname=system.hostname,
        interfaces={i.name: list(i.ipv4) for i in system.interfaces()},
        chosen=gloo[0] if gloo else "",
    )
    return {"report": report.to_dict(), "facts": asdict(facts)}


def doctor_job(
    net: HostNetwork, plan: Plan, checks: tuple[Check, ...] = CHECKS, plan_file: str = ""
) -> JobDoctor:
    """The checks on every host of ``plan`` (entered through ``net``), then reachability."""
    plan_file = plan_file or str(Path(plan.job_dir) / layout.PLAN_FILE)
    names = [c.name for c in checks]
    probes = []
    for host in plan.hosts:
        argv = [sys.executable, "-m", "tenter.doctor.across", plan_file, str(host.index), *names]
        # The host's environment, as its processes have it, but not the job's id: the probe
        # is not one of the job's processes (which the launcher kills when it fences a host).
        env = {
            k: v for k, v in {**os.environ, **plan.host_env(host)}.items() if k != "TENTER_JOB_ID"
        }
        # All hosts at once: each probe imports torch, the slow part.
        probes.append(
            subprocess.Popen(
                [*net.enter(host.name, cwd=plan.cwd), *argv],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    reports, facts = [], []
    for host, proc in zip(plan.hosts, probes, strict=True):
        out, err = proc.communicate(timeout=PROBE_TIMEOUT_S)
        if proc.returncode:
            raise TenterError(
                "JOB",
                f"the doctor failed on host {host.name} (exit {proc.returncode}): "
                f"{err.strip()[-2000:] or 'no message'}",
                "check that the job still runs (`tenter status JOB`)",
            )
        data = json.loads(out)
        reports.append(HostReport.from_dict(data["report"]))
        facts.append(HostFacts(**data["facts"]))
    reachability = reach.probe_reachability(net, facts)
    reports = [
        replace(
            r,
            outcomes=[
                *r.outcomes,
                Outcome(reach.NAME, reach.DESCRIPTION, reachability.verdict(r.host)),
            ],
        )
        for r in reports
    ]
    return JobDoctor(reports, facts, reachability)


def main(argv: list[str]) -> int:
    plan_file, index, *names = argv
    plan = Plan.from_json(Path(plan_file).read_text())
    checks = by_name(names) if names else CHECKS
    print(json.dumps(probe_host(plan, int(index), checks)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
