"""Every problem a spec rule reports says how to fix it (issue 38, item 6): each bad spec below
breaks one or more rules of every module that has them, and every problem found, error or
warning, carries a non-empty fix, printed as ``<field>: <what>. Fix: <how>``. A new rule without
a fix fails here once a spec below (or one added with it) breaks it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tenter.launch.backends.kubernetes import rules as k8s_rules
from tenter.spec import Problem, SpecError, load, load_file
from tests.conftest import REPO, SCRIPTS
from tests.spec.test_bad_input import CASES

BASE: dict[str, Any] = {"entry_point": "contract.py", "source_dir": str(SCRIPTS)}
MPI = {"backend": "mpi", "instance_type": "ml.p3.8xlarge"}
SMP = ("distribution", "smdistributed", "modelparallel")


def smp(**parameters: Any) -> dict[str, Any]:
    return {
        "distribution": {
            "smdistributed": {"modelparallel": {"enabled": True, "parameters": parameters}}
        }
    }


BAD_SPECS: dict[str, dict[str, Any]] = {
    "schema": {"procs_per_host": 2, "instance_count": "two", "name": "x" * 300},
    "aliases and bounds": {"hosts": 2, "instance_count": 3, "args": ["a\0b"], "max_run": -1},
    "entry points": {"module": "m", "command": []},
    "paths and names": {
        "source_dir": "/nonexistent",
        "channels": {"bad name": "/nonexistent"},
        "hyperparameters": {"a b": 1},
        "environment": {"1X": "1", "RANK": "0", "SM_HOSTS": "x", "E": True},
    },
    "backend and isolation": {"backend": "locla", "isolation": "network"},
    "instance type": {"instance_type": "ml.p4d.24xlarg"},
    "gpus and nccl": {
        "instance_type": "ml.c5.18xlarge",
        "process_group_backend": "nccl",
        "processes_per_host": 2,
        "distribution": {"mpi": {"enabled": True, "processes_per_host": 4}},
    },
    "too many": {"instance_type": "ml.p3.8xlarge", "processes_per_host": 8, "instance_count": 200},
    "memory": {**MPI, "instance_type": "ml.c5.18xlarge", "processes_per_host": 1000},
    "logs": {"logs": {"ranks": [5]}},
    "cpu cores (warning)": {"processes_per_host": 4096 // 16, "instance_count": 1},
    "elastic": {
        "instance_count": 2,
        "elastic": {"min_hosts": 3, "on_hang": "restart", "rendezvous": {"backend": "etcd"}},
    },
    "rendezvous": {"elastic": {"rendezvous": {"endpoint": "h:1"}}},
    "etcd endpoint": {"elastic": {"rendezvous": {"backend": "etcd", "endpoint": "etcd:99999"}}},
    "etcd host:port": {"elastic": {"rendezvous": {"backend": "etcd", "endpoint": "etcd"}}},
    "fault tolerance": {
        **MPI,
        "instance_count": 3,
        "fault_tolerance": {"replica_groups": 2, "min_replicas": 3},
        "elastic": {"max_hosts": 4},
        **smp(pipeline_parallel_degree=1),
    },
    "distribution": {
        "distribution": {
            "smdistributed": {
                "dataparallel": {"enabled": True},
                "modelparallel": {"enabled": True},
            },
            "pytorchddp": {"enabled": True},
            "torch_distributed": {"enabled": True},
            "mpi": {"enabled": True, "custom_mpi_options": "--mca a 1 --mca a 2 -x 1X"},
        }
    },
    "smp v1": smp(
        pipeline_parallel_degree=3,
        tensor_parallel_degree=2,
        auto_partition=False,
        default_partition=5,
        placement_strategy="DPX",
        microbatches=1,
        active_microbatches=2,
        ddp=True,
        horovod=True,
        fp16=True,
        bf16=True,
        sharded_data_parallel_degree=3,
        shard_optimizer_state=True,
    ),
    "smp v1 without degree": smp(ddp=True),
    "smp v1 and v2": smp(pipeline_parallel_degree=2, hybrid_shard_degree=2),
    "smp v2": smp(tensor_parallel_degree=3, hybrid_shard_degree=8, context_parallel_degree=9),
    "smp v2 shards": {
        "instance_count": 4,
        **smp(tensor_parallel_degree=2, hybrid_shard_degree=4, expert_parallel_degree=2),
    },
    "smp partitions": smp(partitions=1, pipeline_parallel_degree=1),
    "smp partitions (warning)": {"processes_per_host": 2, **smp(partitions=2)},
    "slurm": {
        "backend": "slurm",
        "slurm": {
            "partition": "gpu;id",
            "qos": "",
            "extra_directives": ["--partition=x", "--nodes=2", "--mail-type=A", "--mail-type=B"],
            "container_mounts": [{"source": "fsx", "target": "/a:b"}],
        },
    },
    "slurm directives": {
        "backend": "slurm",
        "slurm": {
            "extra_directives": ["--a\n--b", "mail"],
            "container_mounts": [{"source": "/a", "target": "/b"}],
        },
    },
    "mpirun": {
        **MPI,
        "mpirun": {"mca": {"BTL": "tcp", "pml": ""}, "network_interface": "eth0; id"},
        "distribution": {"mpi": {"enabled": True, "custom_mpi_options": "'unclosed"}},
    },
    "mpirun rules": {
        **MPI,
        "mpirun": {"mca": {"pml": "ucx"}, "hostfile": "/nonexistent"},
        "elastic": {"max_restarts": 2, "hang_timeout": 60},
        "distribution": {"mpi": {"enabled": True, "custom_mpi_options": "--mca pml ob1 -x"}},
    },
    "mpirun on simulated hosts": {
        "backend": "mpi",
        "mpirun": {"network_interface": "ens5", "hostfile": "/nonexistent"},
    },
    "other backends' blocks (warning)": {
        "slurm": {"partition": "gpu"},
        "mpirun": {"mca": {"a": "b"}},
    },
    "kubernetes volumes": {
        "kubernetes": {"volumes": [{"name": "v", "claim": "c", "mount_path": "data"}]}
    },
}


def _walk(run: Any) -> list[Problem]:
    try:
        _, warnings = run()
    except SpecError as e:
        return e.problems
    return list(warnings)


def test_every_bad_spec_breaks_a_rule_and_every_problem_says_its_fix(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("n1 slots=4 ; id\n")
    cases = {
        **BAD_SPECS,
        "hostfile": {**MPI, "instance_count": 3, "mpirun": {"hostfile": str(hostfile)}},
    }
    seen: list[Problem] = []
    for name, fields in cases.items():
        found = _walk(lambda fields=fields: load({**BASE, **fields}, REPO))
        assert found, f"{name}: the spec breaks no rule"
        seen += found
    (tmp_path / "train.py").write_text("")
    for case in CASES:
        if case.flags:
            continue  # flags: test_bad_input runs them through the CLI
        spec = tmp_path / "job.yaml"
        spec.write_bytes(case.spec.encode() if isinstance(case.spec, str) else case.spec)
        found = _walk(lambda spec=spec: load_file(spec))
        assert found, f"{case.name}: no problem"
        seen += found
    without = [str(p) for p in seen if not p.fix.strip()]
    assert without == [], "problems without a fix:\n" + "\n".join(without)
    assert all(". Fix: " in str(p) or "? Fix: " in str(p) for p in seen if len(str(p)) < 450)
    assert len({p.path.split(".")[0] for p in seen}) >= 20  # the corpus reaches many rules


def _pytorchjob(**spec: Any) -> dict[str, Any]:
    return {"kind": "PyTorchJob", "metadata": {"name": "Bad_Name"}, "spec": spec}


@pytest.mark.parametrize(
    "manifest",
    [
        _pytorchjob(),
        _pytorchjob(
            pytorchReplicaSpecs={
                "Master": {"replicas": 2, "template": {"spec": {"containers": [{"name": "x"}]}}},
                "Chief": {"replicas": 0},
            },
            elasticPolicy={"nProcPerNode": 1},
            nprocPerNode=1,
        ),
        {
            "kind": "MPIJob",
            "metadata": {"name": "a" * 70},
            "spec": {
                "mpiReplicaSpecs": {"Worker": {"replicas": 0, "restartPolicy": "Always"}},
                "slotsPerWorker": -1,
                "runPolicy": {"cleanPodPolicy": "Some", "backoffLimit": -1},
            },
        },
        {
            "kind": "MPIJob",
            "metadata": {"name": "j"},
            "spec": {"mpiReplicaSpecs": {"Launcher": {"replicas": 2}}},
        },
        {"kind": "TrainJob", "metadata": {"name": "j"}, "spec": {"trainer": {"numNodes": 0}}},
        {
            "kind": "ClusterConfig",
            "availabilityZones": ["a"],
            "managedNodeGroups": [{"efaEnabled": True, "availabilityZones": ["a", "b"]}],
        },
        {"kind": "PyTorchJob", "spec": {"x": {"securityContext": {"privileged": True}}}},
        {"kind": "Deployment"},
    ],
)
def test_every_kubernetes_manifest_rule_says_its_fix(manifest: dict[str, Any]) -> None:
    found = k8s_rules.problems(manifest)
    assert found
    assert [str(p) for p in found if not p.fix.strip()] == []
