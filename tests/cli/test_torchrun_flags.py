"""torchrun's flags on ``tenter plan``/``run``: what each sets in the plan, and the errors."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from tenter.cli.main import build_parser, main
from tenter.cli.options import load_job
from tests.conftest import SCRIPTS

SCRIPT = str(SCRIPTS / "contract.py")
CPUS = len(os.sched_getaffinity(0))


def plan_of(capsys: pytest.CaptureFixture[str], *flags: str, script: str = SCRIPT) -> Any:
    assert main(["plan", "--json", "--job-id", "j-1", *flags, script]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (["--nnodes", "3"], {"hosts": 3, "min_hosts": 3, "max_hosts": 3}),
        (["--nnodes", "1:3"], {"hosts": 1, "min_hosts": 1, "max_hosts": 3}),
        (["--nproc-per-node", "3"], {"procs_per_host": 3}),
        (["--nproc_per_node", "cpu"], {"procs_per_host": CPUS}),
        (["--instance-type", "ml.p4d.24xlarge", "--nproc-per-node", "auto"], {"procs_per_host": 8}),
        (["--instance-type", "ml.p4d.24xlarge", "--nproc-per-node", "gpu"], {"procs_per_host": 8}),
        (["--instance-type", "ml.c5.18xlarge", "--nproc-per-node", "auto"], {"procs_per_host": 72}),
        (["--max-restarts", "2"], {"max_restarts": 2}),
        (["--rdzv-backend", "static"], {"rdzv_backend": "c10d"}),
        (
            ["--rdzv-backend", "etcd-v2", "--rdzv-endpoint", "198.18.0.1:2379"],
            {"rdzv_backend": "etcd-v2", "rdzv_endpoint": "198.18.0.1:2379"},
        ),
        (
            ["--rdzv-conf", "join_timeout=5,last_call_timeout=2,read_timeout=60"],
            {"join_timeout": 5, "last_call_timeout": 2},
        ),
        (["--standalone", "--rdzv-backend", "etcd"], {"rdzv_backend": "c10d"}),
    ],
)
def test_plan_follows_torchrun_flag_if_given(
    flags: list[str], expected: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    plan = plan_of(capsys, *flags)
    seen = {key: len(plan[key]) if key == "hosts" else plan[key] for key in expected}
    assert seen == expected


@pytest.mark.parametrize(
    ("flags", "shown"),
    [
        (["--nnodes", "2", "--nproc-per-node", "2", "-t", "3"], None),
        (["--nnodes", "2", "--nproc-per-node", "2", "-r", "3"], []),
        (["--nproc-per-node", "2", "-r", "3", "-t", "0:3"], [0]),
        (["--nproc-per-node", "2", "-r", "0:3,1:1"], [1]),
        (["--nnodes", "2", "--nproc-per-node", "2", "--local_ranks_filter", "1"], [1, 3]),
    ],
)
def test_console_shows_the_ranks_torchrun_flags_name_if_given(
    flags: list[str], shown: list[int] | None, capsys: pytest.CaptureFixture[str]
) -> None:
    # The console's ranks are an option of the console, not of the plan: the plan is the same.
    spec = load_job(build_parser().parse_args(["run", *flags, SCRIPT]))
    assert spec.logs.ranks == shown
    assert "console_ranks" not in plan_of(capsys, *flags)


def test_plan_puts_the_job_under_log_dir_if_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = plan_of(capsys, "--log-dir", str(tmp_path / "logs"))
    assert plan["job_dir"] == str(tmp_path / "logs" / "j-1")


def test_rdzv_id_names_the_job_if_given(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--json", "--rdzv-id", "slurm_42", SCRIPT]) == 0
    assert json.loads(capsys.readouterr().out)["job_id"].startswith("slurm-42-")


def test_workers_start_in_the_callers_directory_if_given_a_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "train.py").write_text("")
    monkeypatch.chdir(tmp_path)
    plan = plan_of(capsys, script="sub/train.py")
    assert plan["cwd"] == str(tmp_path)
    assert plan["command"][-1] == str(tmp_path / "sub" / "train.py")
    outside = plan_of(capsys, script=SCRIPT)  # a script outside the cwd: by its absolute path
    assert (outside["cwd"], outside["command"][-1]) == (str(tmp_path), SCRIPT)


def test_module_gets_every_argument_after_it_if_run_as_torchrun_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert (
        main(["plan", "--json", "--nproc-per-node", "2", "-m", "json.tool", "--indent", "3"]) == 0
    )
    plan = json.loads(capsys.readouterr().out)
    assert plan["command"][-4:] == ["-m", "json.tool", "--indent", "3"]
    assert plan["procs_per_host"] == 2


def test_flags_without_effect_here_say_so_if_given(capsys: pytest.CaptureFixture[str]) -> None:
    flags = ["--node-rank", "1", "--master-addr", "10.0.0.1", "--master-port", "29500"]
    flags += ["--start-method", "fork", "--monitor-interval", "5", "--role", "trainer"]
    flags += ["--rdzv-conf", "read_timeout=60", "--rdzv-endpoint", "localhost:29400"]
    assert main(["plan", *flags, SCRIPT]) == 0
    err = " ".join(capsys.readouterr().err.split())
    for text in (
        "note: --node-rank 1 is ignored: tenter starts every host of the job",
        "note: --master-addr/--master-port are ignored: tenter picks a free port per job",
        "note: --start-method fork has no effect, as under torchrun",
        "note: --monitor-interval: tenter's hosts check their workers every 0.1 s",
        "note: --role trainer: ROLE_NAME stays `default`",
        "note: --rdzv-conf read_timeout is ignored: tenter takes join_timeout, last_call_timeout",
        "note: --rdzv-endpoint localhost:29400 is ignored: tenter serves the job's c10d store",
    ):
        assert text in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--nnodes", "2:1"],
            "--nnodes: '2:1' is not N or MIN:MAX. Fix: give N or MIN:MAX with 0 < MIN <= MAX",
        ),
        (["--nnodes", "two"], "--nnodes: 'two' is not N or MIN:MAX"),
        (
            ["--nproc-per-node", "many"],
            "--nproc-per-node: 'many' is not a number of processes. Fix: give a number of at "
            "least 1, auto, cpu or gpu",
        ),
        (["--nproc-per-node", "0"], "--nproc-per-node: '0' is not a number of processes"),
        (
            ["--max-restarts", "-1"],
            "--max-restarts: -1 is out of range. Fix: give a value at least 0",
        ),
        (
            ["--master-port", "70000"],
            "--master-port: 70000 is out of range. Fix: give a value from 0",
        ),
        (["--monitor-interval", "0"], "--monitor-interval: 0.0 is out of range"),
        (
            ["--instance-type", "ml.c5.18xlarge", "--nproc-per-node", "gpu"],
            "--nproc-per-node: gpu: c5.18xlarge has no GPUs. Fix: give a number",
        ),
        (
            ["--rdzv-backend", "zookeeper"],
            "--rdzv-backend: 'zookeeper' is not a rendezvous backend tenter knows. Fix: give one "
            "of c10d",
        ),
        (
            ["--rdzv-conf", "join_timeout=soon"],
            "--rdzv-conf: join_timeout=soon is not whole seconds",
        ),
        (["--rdzv-conf", "oops"], "--rdzv-conf: 'oops' is not KEY=VALUE"),
        (["-r", "7"], "--redirects: '7' is not 0-3 or LOCAL_RANK:0-3"),
        (["-t", "0:9"], "--tee: '0:9' is not 0-3 or LOCAL_RANK:0-3"),
        (
            ["--local-ranks-filter", "first"],
            "--local-ranks-filter: 'first' is not a list of local ranks. Fix: give a list like "
            "0,1,2",
        ),
        (
            ["--hosts", "2", "--nnodes", "3"],
            "--nnodes: 3 contradicts --hosts 2. Fix: give one of them",
        ),
        (
            ["--ranks", "0", "--local-ranks-filter", "0"],
            "--ranks: is given with torchrun's -r/-t/--local-ranks-filter. Fix: give --ranks or "
            "torchrun's",
        ),
        (["--output-dir", "a", "--log-dir", "b"], "--log-dir: contradicts --output-dir a"),
    ],
)
def test_bad_torchrun_value_exits_2_naming_the_flag(
    flags: list[str], message: str, tenter_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", *flags, SCRIPT]) == 2
    assert message in " ".join(capsys.readouterr().err.split())
    assert not tenter_home.exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["run", "--nproc", "2"],
            "tenter run: error: unknown flag --nproc. Did you mean --nproc-per-node?",
        ),
        (["run", "--nnode=2"], "tenter run: error: unknown flag --nnode. Did you mean --nnodes?"),
        (
            ["plan", "--max-restart", "1"],
            "tenter plan: error: unknown flag --max-restart. Did you mean",
        ),
        (
            ["run", "--numa_binding", "node"],
            "tenter run: error: --numa_binding is a torchrun flag tenter",
        ),
        (
            ["run", "--max-restarts", "x"],
            "tenter run: error: argument --max-restarts: invalid int value",
        ),
        (
            ["run", "--start-method", "thread"],
            "tenter run: error: argument --start-method: invalid choice",
        ),
        (["--bogus", "run"], "tenter: error: unknown flag --bogus. See `tenter --help`"),
    ],
)
def test_bad_flag_exits_2_with_a_hint_not_the_usage(
    argv: list[str], message: str, tenter_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main([*argv, SCRIPT])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(message)
    assert "usage:" not in err
    assert not tenter_home.exists()


@pytest.mark.cuda
def test_nproc_per_node_gpu_counts_the_gpus_torchrun_counts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for kind in ("gpu", "auto"):
        assert plan_of(capsys, "--nproc-per-node", kind)["procs_per_host"] == (
            torch.cuda.device_count()
        )


@pytest.mark.parametrize(("gpus", "hosts", "per_host"), [(1, 1, 1), (8, 1, 8), (8, 2, 4)])
def test_nproc_per_node_gpu_counts_each_hosts_share_of_the_gpus(
    capsys: pytest.CaptureFixture[str],
    fake_gpus: Callable[[int], Path],
    gpus: int,
    hosts: int,
    per_host: int,
) -> None:
    fake_gpus(gpus)
    for kind in ("gpu", "auto"):
        plan = plan_of(capsys, "--hosts", str(hosts), "--nproc-per-node", kind)
        assert plan["procs_per_host"] == per_host


def test_nproc_per_node_gpu_exits_2_if_this_machine_has_none(
    capsys: pytest.CaptureFixture[str], fake_gpus: Callable[[int], Path]
) -> None:
    fake_gpus(0)
    assert main(["plan", "--nproc-per-node", "gpu", SCRIPT]) == 2
    assert "--nproc-per-node: gpu: local has no GPUs. Fix: give a number" in capsys.readouterr().err
