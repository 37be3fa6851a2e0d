"""``tenter doctor --job``: the checks inside every isolated host of a running job, and the
check that every host reaches every other on the interface gloo uses."""

from __future__ import annotations

import dataclasses
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from rich.console import Console

from tenter.contract.plan import Plan
from tenter.contract.planner import make_plan
from tenter.doctor.across import HostFacts, JobDoctor, doctor_job
from tenter.doctor.checks import by_name
from tenter.doctor.render import facts_table, reach_table
from tenter.doctor.result import CheckResult, Status
from tenter.errors import ExitCode
from tenter.launch.launcher.isolation.network import HostNetwork
from tenter.spec import load_file
from tests.conftest import SCRIPTS, Background, assert_nothing_left, tenter


def isolated_plan(tmp_path: Path, hosts: int, **env: str) -> Plan:
    """The plan of a job on ``hosts`` isolated hosts, written where the probes read it."""
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(
        yaml.safe_dump(
            {
                "entry_point": str(SCRIPTS / "block.py"),
                "instance_count": hosts,
                "isolation": "network",
            }
        )
    )
    spec, _ = load_file(spec_file, {})
    plan = make_plan(spec, "doctor-test", tmp_path, sys.executable)
    plan = dataclasses.replace(
        plan, hosts=[dataclasses.replace(h, env={**h.env, **env}) for h in plan.hosts]
    )
    Path(plan.job_dir).mkdir(parents=True)
    (Path(plan.job_dir) / "plan.json").write_text(plan.to_json())
    return plan


@pytest.fixture
def network() -> Iterator[HostNetwork]:
    with HostNetwork(["algo-1", "algo-2"]) as net:
        yield net


def doctor(net: HostNetwork, plan: Plan) -> JobDoctor:
    return doctor_job(net, plan, by_name(["interfaces"]))


def rendered(found: JobDoctor) -> str:
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(facts_table(found.facts))
    console.print(reach_table(found.reachability))
    return console.export_text()


def test_a_partitioned_host_is_unreachable_naming_the_pair_and_interface(
    tmp_path: Path, network: HostNetwork
) -> None:
    plan = isolated_plan(tmp_path, 2)
    network.partition("algo-2")
    found = doctor(network, plan)
    results = {r.host: r.result("reachability") for r in found.reports}
    assert {h: r.status for h, r in results.items() if r} == {
        "algo-1": Status.FAIL,
        "algo-2": Status.FAIL,
    }
    algo_1 = results["algo-1"]
    assert algo_1 is not None
    assert "algo-1 cannot reach algo-2 at 198.18.101.1:" in algo_1.found
    assert "from eth0: no answer in 2 s" in algo_1.found
    assert "tenter fault JOB heal HOST" in algo_1.remedy
    assert "unreachable" in rendered(found)
    network.heal("algo-2")
    healed = doctor(network, plan)
    assert [(r.host, r.result("reachability")) for r in healed.reports] == [
        ("algo-1", CheckResult.ok("reaches algo-2 on eth0")),
        ("algo-2", CheckResult.ok("reaches algo-1 on eth0")),
    ]


def test_the_wrong_interface_is_found(tmp_path: Path, network: HostNetwork) -> None:
    # The classic hang: gloo told to use loopback on hosts that only meet over eth0.
    found = doctor(network, isolated_plan(tmp_path, 2, GLOO_SOCKET_IFNAME="lo"))
    for report in found.reports:
        interfaces, reach = report.result("interfaces"), report.result("reachability")
        assert interfaces is not None and interfaces.status is Status.WARN
        assert "gloo would use loopback in a 2-host job" in interfaces.found
        assert reach is not None and reach.status is Status.FAIL
        assert "at 127.0.0.1:" in reach.found and "from lo" in reach.found
    assert [f.chosen for f in found.facts] == ["lo", "lo"]


def test_doctor_job_runs_inside_every_host_of_a_running_job(tmp_path: Path) -> None:
    release = tmp_path / "release"
    job = Background(
        "run", "--isolation", "network", "--hosts", "2", "--env", f"RELEASE_FILE={release}",
        str(SCRIPTS / "wait_for_file.py"),
    )  # fmt: skip
    job.wait_for("ready", count=2)
    shown = tenter("doctor", "--job", job.job_dir.name, "--check", "interfaces")
    as_json = tenter("doctor", "--job", job.job_dir.name, "--check", "interfaces", "--json")
    release.touch()
    out = job.finish()
    assert job.proc.returncode == 0, out
    assert shown.returncode == 0, shown.stdout + shown.stderr
    for text in ("hostname", "gloo interface", "eth0", "198.18.100.1", "198.18.101.1"):
        assert text in shown.stdout
    assert "reachability" in shown.stdout
    reports = json.loads(as_json.stdout)
    assert reports["ok"]
    assert [
        (h["host"], [(c["check"], c["status"], c["found"]) for c in h["checks"]][-1])
        for h in reports["hosts"]
    ] == [
        ("algo-1", ("reachability", "pass", "reaches algo-2 on eth0")),
        ("algo-2", ("reachability", "pass", "reaches algo-1 on eth0")),
    ]
    assert_nothing_left(job.job_dir)


def test_doctor_job_refuses_bad_input(tmp_path: Path) -> None:
    unknown = tenter("doctor", "--job", "no-such-job")
    assert unknown.returncode == ExitCode.NO_SUCH_JOB
    assert "no job 'no-such-job'" in unknown.stderr
    both = tenter("doctor", "job.yaml", "--job", "some-job")
    assert both.returncode == ExitCode.BAD_INPUT
    assert "--job: checks a running job's hosts as they are. Fix: drop SPEC" in both.stderr


def test_the_hosts_table_stays_readable_at_100_columns_whatever_the_hosts() -> None:
    # A row per host: 8 hosts keep each value whole on one line of at most 100 columns (a
    # column per host wrapped a 4-host job's addresses into ~20-character pieces).
    facts = [
        HostFacts(
            f"algo-{i}",
            f"algo-{i}",
            {"lo": ["127.0.0.1"], "eth0": [f"198.18.{100 + i}.1"]},
            "eth0",
        )
        for i in range(1, 9)
    ]
    console = Console(width=100, record=True, file=io.StringIO())
    console.print(facts_table(facts))
    lines = console.export_text().splitlines()
    assert max(len(line) for line in lines) <= 100
    for i in range(1, 9):
        (row,) = [line for line in lines if f"│ algo-{i} " in line]
        assert f"lo 127.0.0.1, eth0 198.18.{100 + i}.1" in row and "│ eth0 " in row
