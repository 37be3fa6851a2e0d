"""Kubernetes manifests: golden files of a 2-node p5 EFA job in each form, every rendered
object valid against the upstream CRD (or eksctl) schema and the operators' webhook rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tenter.launch.backends.kubernetes import KubernetesBackend, eksctl
from tenter.launch.backends.kubernetes import kinds as k8s_kinds
from tenter.launch.backends.kubernetes import rules as k8s_rules
from tenter.launch.backends.kubernetes.request import to_yaml
from tenter.spec import SpecError, lookup
from tests.conftest import assert_golden
from tests.launch.kubernetes.k8s_schemas import schema_errors
from tests.launch.kubernetes.k8s_specs import JOB_ID, MPI, dryrun, p5_spec

HERE = Path(__file__).parent
GOLDEN = HERE / "golden"
FORMS = {
    "pytorchjob": {"distribution": {"torch_distributed": {"enabled": True}}},
    "pytorchjob-elastic": {
        "elastic": {
            "min_hosts": 1,
            "max_hosts": 3,
            "max_restarts": 2,
            "rendezvous": {"backend": "etcd", "endpoint": "etcd.ml.svc:2379"},
        },
        "max_run": None,
    },
    "mpijob": MPI,
    "trainjob": {"kubernetes": {"kind": "TrainJob"}, "max_run": None},
}


@pytest.mark.parametrize("form", FORMS)
def test_dryrun_matches_golden_file_for_2_p5_nodes(form: str) -> None:
    request = dryrun(p5_spec(**FORMS[form]))
    assert_golden(GOLDEN / f"{form}-p5-2nodes.yaml", str(request))


@pytest.mark.parametrize("form", FORMS)
def test_every_rendered_object_is_valid_for_its_crd_and_webhook(form: str) -> None:
    for obj in dryrun(p5_spec(**FORMS[form])).materialize():
        assert schema_errors(obj) == []
        assert k8s_rules.problems(obj) == []


@pytest.mark.parametrize(
    ("itype", "ranks"), [("ml.g5.48xlarge", 2), ("ml.c5.18xlarge", 1), ("ml.p4d.24xlarge", 3)]
)
def test_other_instance_types_and_sizes_are_valid_for_their_crds(itype: str, ranks: int) -> None:
    for overrides in ({}, MPI, {"kubernetes": {"kind": "TrainJob"}, "max_run": None}):
        spec = p5_spec(instance_type=itype, instance_count=ranks, **overrides)
        for obj in dryrun(spec).materialize():
            assert schema_errors(obj) == []
            assert k8s_rules.problems(obj) == []


def test_pods_get_the_catalog_resources_and_no_privileges() -> None:
    obj = dryrun(p5_spec()).materialize()[0]
    pod = obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    [container] = pod["containers"]
    itype = lookup("p5.48xlarge")
    assert itype is not None
    assert container["resources"]["limits"]["nvidia.com/gpu"] == itype.gpus == 8
    assert container["resources"]["limits"]["vpc.amazonaws.com/efa"] == itype.efa == 32
    assert pod["nodeSelector"] == {"node.kubernetes.io/instance-type": "p5.48xlarge"}
    assert container["securityContext"] == {"privileged": False}


def test_a_type_without_efa_gets_no_efa_resources_or_variables() -> None:
    obj = dryrun(p5_spec(instance_type="ml.p3.16xlarge")).materialize()[0]
    [container] = obj["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    assert "vpc.amazonaws.com/efa" not in container["resources"]["limits"]
    assert "hugepages-2Mi" not in container["resources"]["limits"]
    assert "FI_PROVIDER" not in {e["name"] for e in container["env"]}


def test_pods_get_the_process_group_backend_the_spec_chose() -> None:
    # (an MPIJob's ranks: test_mpi_launcher.py)
    chosen = p5_spec(process_group_backend="tenter", **FORMS["pytorchjob"])
    obj = dryrun(chosen).materialize()[0]
    [container] = obj["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TENTER_PG_BACKEND"] == "tenter"


def test_plan_output_lists_every_object_as_yaml(tmp_path: Path) -> None:
    request = dryrun(p5_spec(**MPI))
    [path] = request.write(tmp_path)
    assert path.name == f"mpijob-{JOB_ID}.yaml"
    assert path.read_text() == str(request) == to_yaml(request.objects)


def test_auto_kind_follows_the_distribution() -> None:
    for distribution, kind in (
        ({"torch_distributed": {"enabled": True}}, "PyTorchJob"),
        ({}, "PyTorchJob"),
        ({"mpi": {"enabled": True}}, "MPIJob"),
        ({"smdistributed": {"dataparallel": {"enabled": True}}}, "MPIJob"),
        ({"pytorchddp": {"enabled": True}}, "MPIJob"),
    ):
        assert k8s_kinds.choose_kind(p5_spec(distribution=distribution)) == kind


@pytest.mark.parametrize(
    ("overrides", "problem"),
    [
        (
            {"kubernetes": {"image": None}},
            "kubernetes.image: is required on backend kubernetes",
        ),
        ({"instance_type": "local"}, "instance_type: 'local' means this machine"),
        ({"channels": {"train": str(HERE)}}, "channels: local input channels cannot reach pods"),
        ({**MPI, "elastic": {"min_hosts": 1}}, "elastic: a MPIJob cannot change size"),
        (
            {"kubernetes": {"kind": "TrainJob"}},
            "max_run: a TrainJob (v1alpha1) has no deadline",
        ),
        ({"name": "LLM"}, "PyTorchJob metadata.name: the name 'LLM-20261122"),
        (
            {"name": "x" * 40},
            "has 70 characters, more than Kubernetes' 63. Fix: shorten the job's name by 7",
        ),
    ],
)
def test_dryrun_names_the_field_and_fix_if_the_spec_cannot_run_on_kubernetes(
    overrides: dict[str, Any], problem: str
) -> None:
    spec = p5_spec(**overrides)
    job_id = JOB_ID.replace("llm", spec.name)
    with pytest.raises(SpecError) as info:
        KubernetesBackend().dryrun(spec, job_id)
    assert problem in str(info.value)


def test_cluster_config_is_valid_for_eksctl_and_puts_efa_nodes_in_one_zone() -> None:
    itype = lookup("p5.48xlarge")
    assert itype is not None
    config = eksctl.cluster_config("train", "us-west-2", itype, 2, ["us-west-2a", "us-west-2b"])
    assert schema_errors(config) == []
    assert k8s_rules.problems(config) == []
    assert_golden(GOLDEN / "eksctl-p5-2nodes.yaml", to_yaml([config]))
