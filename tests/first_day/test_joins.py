"""Issue 38, item 4: joins that keep the job. ``tenter join`` leaves ``plan.json`` as
launched (the hosts that join are in ``membership.jsonl``), the goodput ledger starts at the
launch, a join as the job ends changes nothing, and docs/elastic.md's spec block with
``examples/elastic/train.py`` grows to 3 hosts."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import yaml

from tests.conftest import REPO, WAIT_S, Background, assert_nothing_left, tenter

HELD = """\
# A plain torchrun script: the ranks of the first FREE_GROUPS hosts finish at once; the
# others wait for the RELEASE file (which the test creates), then finish.
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
t = torch.ones(1)
dist.all_reduce(t)
print(f"ready world {dist.get_world_size()} rank {dist.get_rank()}", flush=True)
if int(os.environ["GROUP_RANK"]) >= int(os.environ["FREE_GROUPS"]):
    while not os.path.exists(os.environ["RELEASE"]):
        time.sleep(0.05)
print(f"done rank {dist.get_rank()}", flush=True)
dist.destroy_process_group()
"""

GROWS = """\
# A plain torchrun script: all-reduces until the world has TARGET_WORLD ranks, then ends.
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
world = dist.get_world_size()
print(f"ready world {world} rank {dist.get_rank()}", flush=True)
t = torch.ones(1)
while world != int(os.environ["TARGET_WORLD"]):
    dist.all_reduce(t)  # until the join restarts this attempt
    time.sleep(0.1)
print(f"done world {world}", flush=True)
dist.destroy_process_group()
"""

ELASTIC = {"min_hosts": 1, "max_hosts": 3, "max_restarts": 1}


def _spec(tmp_path: Path, script: str, **fields: object) -> Path:
    entry = tmp_path / "train.py"
    entry.write_text(script)
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"entry_point": str(entry), "processes_per_host": 1, **fields}))
    return spec


def _wait_for_file(folder: Path, pattern: str, job: Background) -> None:
    deadline = time.monotonic() + WAIT_S
    while not (folder.is_dir() and any(folder.glob(pattern))):
        if time.monotonic() > deadline:
            job.fail(f"{folder / pattern} did not appear within {WAIT_S:.0f} s")
        time.sleep(0.05)


def _held_job(tmp_path: Path, tenter_home: Path, free_groups: int) -> tuple[Background, Path]:
    """A job of 2 hosts running HELD, and the file that releases its held ranks."""
    release = tmp_path / "release"
    spec = _spec(
        tmp_path,
        HELD,
        instance_count=2,
        environment={"FREE_GROUPS": str(free_groups), "RELEASE": str(release)},
        elastic={**ELASTIC, "rendezvous": {"last_call_timeout": 1}},
    )
    return Background("run", str(spec), home=tenter_home), release


def _join(job: Background) -> None:
    joined = tenter("join", job.job_dir.name)
    assert joined.returncode == 0, joined.stderr


def test_a_join_leaves_the_plan_as_launched_and_the_ledger_spans_the_job(
    tmp_path: Path, tenter_home: Path
) -> None:
    spec = _spec(
        tmp_path,
        GROWS,
        instance_count=1,
        environment={"TARGET_WORLD": "2"},
        elastic={**ELASTIC, "rendezvous": {"last_call_timeout": 1}},
    )
    job = Background("run", str(spec), home=tenter_home)
    job.wait_for("ready world 1 rank 0")
    launched = (job.job_dir / "plan.json").read_bytes()
    _join(job)
    out = job.finish()
    assert job.proc.returncode == 0, out
    assert "rendezvous: 2 hosts (algo-1, algo-2), world size 2" in out
    assert (job.job_dir / "plan.json").read_bytes() == launched  # written once, at launch
    lines = [json.loads(s) for s in (job.job_dir / "membership.jsonl").read_text().splitlines()]
    assert [(e["event"], e.get("host")) for e in lines] == [("launch", None), ("join", "algo-2")]
    # The ledger spans the whole job, not the time since the join.
    summary = json.loads((job.job_dir / "summary.json").read_text())
    ledger = json.loads((job.job_dir / "goodput.json").read_text())
    assert abs(ledger["wall_s"] - summary["duration_s"]) < 1.0, (ledger, summary["duration_s"])
    assert summary["hosts"] == 2
    assert_nothing_left(job.job_dir)


def test_a_join_after_ranks_finished_is_refused_and_the_job_succeeds(
    tmp_path: Path, tenter_home: Path
) -> None:
    job, release = _held_job(tmp_path, tenter_home, free_groups=1)
    job.wait_for("done rank 0")
    _wait_for_file(job.job_dir / "logs", "rank-0.finished", job)  # its script returned
    _join(job)
    job.wait_for("cannot add a host: the job is ending (rank 0 on algo-1 finished its script)")
    release.touch()
    out = job.finish()
    assert job.proc.returncode == 0, out
    assert "joining" not in out and "restarting" not in out, out
    assert json.loads((job.job_dir / "summary.json").read_text())["hosts"] == 2
    assert not (job.job_dir / "hosts" / "algo-3").exists()
    assert_nothing_left(job.job_dir)


def test_a_host_that_joins_as_the_job_ends_leaves_it_succeeded(
    tmp_path: Path, tenter_home: Path
) -> None:
    job, release = _held_job(tmp_path, tenter_home, free_groups=0)
    job.wait_for("ready world 2 rank 0", "ready world 2 rank 1")
    _join(job)
    job.wait_for("host algo-3 joining")
    # The ranks finish while algo-3's agent still imports torch: the hosts end and close the
    # rendezvous before it enters.
    release.touch()
    out = job.finish()
    assert job.proc.returncode == 0, out
    assert "succeeded" in out and "RendezvousClosedError" not in out, out
    assert "algo-3 joined as the job ended: it never entered it" in out
    assert_nothing_left(job.job_dir)


def _documented_elastic_spec() -> dict[str, object]:
    """docs/elastic.md's first yaml block, as a user copies it."""
    text = (REPO / "docs" / "elastic.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", text, re.S)
    assert block is not None
    spec: dict[str, object] = yaml.safe_load(block.group(1))
    return spec


def test_the_documented_spec_and_example_grow_to_three_hosts(
    tmp_path: Path, tenter_home: Path
) -> None:
    documented = _documented_elastic_spec()
    elastic = documented["elastic"]
    assert isinstance(elastic, dict) and elastic["max_hosts"] == 3
    # 2 of 3 hosts: the first round waits the last call; torchrun's 30 s delayed every start.
    assert elastic["rendezvous"]["last_call_timeout"] <= 5
    spec = tmp_path / "job.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                **documented,
                "entry_point": str(REPO / "examples" / "elastic" / "train.py"),
                "instance_count": 2,
                "processes_per_host": 1,
            }
        )
    )
    job = Background("run", str(spec), "--", "--epochs", "150", home=tenter_home)
    job.wait_for("rendezvous: 2 hosts (algo-1, algo-2), world size 2")
    _join(job)
    job.wait_for("rendezvous: 3 hosts (algo-1, algo-2, algo-3), world size 3")
    out = job.finish()
    assert job.proc.returncode == 0, out
    assert "global batch 63 (21 per rank x 3 ranks)" in out
    assert "done after" in out and "restarting its workers (2 restarts left)" not in out, out
    assert (job.job_dir / "hosts" / "algo-1" / "model" / "model.pt").exists()
    assert_nothing_left(job.job_dir)


def test_status_says_the_job_waits_for_its_rendezvous(tmp_path: Path, tenter_home: Path) -> None:
    spec = _spec(
        tmp_path,
        GROWS,
        instance_count=1,
        environment={"TARGET_WORLD": "2"},
        # Its first round waits for a second host (max_hosts) for up to 2 minutes.
        elastic={**ELASTIC, "max_hosts": 2, "rendezvous": {"last_call_timeout": 120}},
    )
    job = Background("run", str(spec), home=tenter_home)
    _wait_for_file(tenter_home / "jobs", "*/handle.json", job)  # tenter status finds it
    job_id = job.job_dir.name
    status = tenter("status", job_id).stdout
    waiting = (
        "rendezvous: algo-1 starting or waiting for a round (a round of fewer than max_hosts 2 "
        "hosts forms last_call_timeout 120 s after its last host came)"
    )
    if "RUNNING" not in status or waiting not in status or "no rank reported a step" in status:
        job.fail(f"tenter status said:\n{status}")  # stops the job, which waits for a host
    assert tenter("join", job_id).returncode == 0  # max_hosts: the round forms at once
    out = job.finish()
    assert job.proc.returncode == 0, out
    assert "done world 2" in out
    assert_nothing_left(job.job_dir)
