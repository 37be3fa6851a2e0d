"""``tenter k8s``: the eksctl ClusterConfig and the nccl-tests MPIJob it prints, and its
answers to bad flags (exit 2, the flag, what is wrong, the fix)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tenter.cli.main import main
from tenter.launch.backends.kubernetes import rules as k8s_rules
from tests.conftest import assert_golden
from tests.launch.kubernetes.k8s_schemas import schema_errors
from tests.launch.kubernetes.k8s_specs import launcher_job

GOLDEN = Path(__file__).parents[1] / "launch" / "kubernetes" / "golden"
CLUSTER = [
    "k8s", "cluster-config", "--name", "train", "--region", "us-west-2",
    "--instance-type", "p5.48xlarge", "--nodes", "2", "--azs", "us-west-2a,us-west-2b",
]  # fmt: skip
NCCL = ["k8s", "nccl-tests", "--instance-type", "p5.48xlarge", "--nodes", "2", "--image", "efa:1"]


def test_cluster_config_prints_the_golden_config_and_the_device_plugin_hint(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(CLUSTER) == 0
    out, err = capsys.readouterr()
    assert_golden(GOLDEN / "eksctl-p5-2nodes.yaml", out)
    assert "kubectl get daemonset -n kube-system aws-efa-k8s-device-plugin-daemonset" in err
    assert "install the MPI Operator" in err


def test_nccl_tests_prints_a_valid_mpijob_with_one_rank_per_gpu(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert main([*NCCL, "--out", str(tmp_path / "job.yaml")]) == 0
    text = (tmp_path / "job.yaml").read_text()
    assert_golden(GOLDEN / "nccl-tests-p5-2nodes.yaml", text)
    job = yaml.safe_load(text)
    assert schema_errors(job) == [] and k8s_rules.problems(job) == []
    assert job["spec"]["slotsPerWorker"] == 8


def test_nccl_tests_with_tenter_perf_runs_the_perf_module(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([*NCCL, "--workload", "tenter-perf", "--collective", "alltoall"]) == 0
    job = yaml.safe_load(capsys.readouterr().out)
    assert schema_errors(job) == []
    command = launcher_job(job).plan(29500).command
    # p5 nodes have GPUs: the benchmark runs NCCL on them, not gloo on the CPUs.
    tail = ["-m", "tenter.perf", "alltoall", "-b", "8", "-e", "16G", "-f", "2", "--device", "cuda"]
    assert command[-len(tail) :] == tail


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            [*CLUSTER[:-1], "us-west-2a"],
            "--azs: lists 1; EKS needs at least 2. Fix: list 2 or more (the node groups may use "
            "one of them)",
        ),
        (
            [*CLUSTER[:-1], "eu-west-1a,eu-west-1b"],
            "--azs eu-west-1a,eu-west-1b: 'eu-west-1a' is not a zone of us-west-2; write zones "
            "like us-west-2a,us-west-2b",
        ),
        (
            [*CLUSTER[:5], "west", *CLUSTER[6:]],
            "--region west: not an AWS region name; e.g. us-west-2",
        ),
        ([*NCCL[:3], "p9.xlarge", *NCCL[4:]], "--instance-type 'p9.xlarge' is not in the catalog"),
        ([*NCCL, "-e", "16Q"], "-e 16Q: '16Q' is not a size"),
        ([*NCCL[:5], "0", *NCCL[6:]], "--nodes 0: the benchmark needs at least 1 node"),
    ],
)
def test_bad_flag_exits_2_naming_the_flag_and_the_fix(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    assert message in capsys.readouterr().err
