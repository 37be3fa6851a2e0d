"""Every spec rule, with the error text a user reads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tenter.spec import SpecError, load

HERE = Path(__file__).parent


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as info:
        load({"entry_point": Path(__file__).name, "source_dir": str(HERE), **data}, HERE)
    return [str(p) for p in info.value.problems]


def warnings_of(data: dict[str, Any]) -> list[str]:
    _, warnings = load({"entry_point": Path(__file__).name, "source_dir": str(HERE), **data}, HERE)
    return [str(w) for w in warnings]


def test_load_accepts_a_valid_spec_and_resolves_paths() -> None:
    spec, warnings = load(
        {"entry_point": "conftest.py", "source_dir": ".", "hosts": 2, "channels": {"train": "."}},
        HERE.parent,
    )
    assert spec.instance_count == 2
    assert spec.source_dir == str(HERE.parent) and spec.channels["train"] == str(HERE.parent)
    assert warnings == [] or all("CPU cores" in str(w) for w in warnings)


def test_load_raises_with_did_you_mean_if_a_key_is_misspelled() -> None:
    assert problems({"distribution": {"mpi": {"enabled": True, "process_per_host": 2}}}) == [
        "distribution.mpi.process_per_host: unknown field. Fix: rename it to 'processes_per_host'"
    ]
    assert problems({"hyperparameter": {}}) == [
        "hyperparameter: unknown field. Fix: rename it to 'hyperparameters'"
    ]


def test_load_lists_every_problem_at_once_if_several_are_wrong() -> None:
    found = problems(
        {
            "processes_per_host": 0,
            "instance_type": "ml.p4d.24xlarg",
            "channels": {"train": "/does/not/exist"},
            "entry_point": "missing.py",
        }
    )
    assert found[0] == "processes_per_host: 0 is not greater than 0. Fix: make it greater than 0"
    assert any(
        p.startswith(
            "instance_type: 'ml.p4d.24xlarg' is not in the catalog. Did you mean 'ml.p4d.24xlarge'?"
        )
        for p in found
    )
    assert "channels.train: '/does/not/exist' does not exist. Fix: give an existing path" in found
    assert any(
        p.startswith("entry_point: 'missing.py' does not exist in source_dir") for p in found
    )
    assert len(found) == 4


def test_load_raises_if_the_entry_point_is_missing_or_doubled() -> None:
    with pytest.raises(SpecError, match=r"entry_point: is required\. Fix: set entry_point"):
        load({"source_dir": str(HERE)}, HERE)
    assert problems({"module": "x"}) == [
        "module: cannot be combined with entry_point. Fix: keep one"
    ]


def test_load_raises_if_wrong_types_are_given() -> None:
    # The field is named as the user spelled it (``hosts`` is instance_count's other name).
    assert problems({"hosts": "two"}) == [
        "hosts: 'two' is not a valid integer. Fix: make it a valid integer"
    ]
    # Nothing is converted: YAML's `true` is not the count 1, nor the text "2" the number 2.
    assert problems({"instance_count": True, "distribution": {"mpi": {"enabled": "yes"}}}) == [
        "instance_count: True is not a valid integer. Fix: make it a valid integer",
        "distribution.mpi.enabled: 'yes' is not a valid boolean. Fix: make it a valid boolean",
    ]


@pytest.mark.parametrize(
    ("distribution", "expected"),
    [
        (
            {
                "smdistributed": {
                    "dataparallel": {"enabled": True},
                    "modelparallel": {
                        "enabled": True,
                        "parameters": {"pipeline_parallel_degree": 1},
                    },
                }
            },
            "distribution.smdistributed: dataparallel and modelparallel are both enabled",
        ),
        (
            {"pytorchddp": {"enabled": True}, "smdistributed": {"dataparallel": {"enabled": True}}},
            "distribution.pytorchddp: cannot be combined with smdistributed",
        ),
        (
            {"smdistributed": {"modelparallel": {"enabled": True}}},
            "distribution.smdistributed.modelparallel.parameters.pipeline_parallel_degree: "
            "is required when modelparallel is enabled",
        ),
        (
            {
                "smdistributed": {
                    "modelparallel": {
                        "enabled": True,
                        "parameters": {"pipeline_parallel_degree": 3},
                    }
                }
            },
            "the world size 4 (hosts x processes_per_host) is not divisible by "
            "pipeline_parallel_degree x tensor_parallel_degree = 3 x 1 = 3",
        ),
        (
            {
                "smdistributed": {
                    "modelparallel": {
                        "enabled": True,
                        "parameters": {"pipeline_parallel_degree": 2, "microbatches": 0},
                    }
                }
            },
            "parameters.microbatches: 0 is not greater than 0. Fix: make it greater than 0",
        ),
        (
            {
                "smdistributed": {
                    "modelparallel": {
                        "enabled": True,
                        "parameters": {"pipeline_parallel_degree": 2, "auto_partition": False},
                    }
                }
            },
            "parameters.default_partition: is required when auto_partition is false",
        ),
        (
            {
                "smdistributed": {
                    "modelparallel": {
                        "enabled": True,
                        "parameters": {
                            "pipeline_parallel_degree": 2,
                            "auto_partition": False,
                            "default_partition": 2,
                        },
                    }
                }
            },
            "default_partition: 2 is not a partition. Fix: make it less than "
            "pipeline_parallel_degree (2)",
        ),
        (
            {
                "smdistributed": {
                    "modelparallel": {
                        "enabled": True,
                        "parameters": {"partitions": 2, "pipeline_parallel_degree": 2},
                    }
                }
            },
            "parameters.partitions: is the old name of pipeline_parallel_degree, and both are set",
        ),
        (
            {
                "smdistributed": {
                    "modelparallel": {
                        "enabled": True,
                        "parameters": {"pipeline_parallel_degree": 2, "placement_strategy": "DPX"},
                    }
                }
            },
            "placement_strategy: 'DPX' is not valid. Fix: use 'cluster', 'spread', or a "
            "permutation",
        ),
        (
            {"mpi": {"enabled": True, "custom_mpi_options": "--mca btl_tcp_if_include"}},
            "distribution.mpi.custom_mpi_options: '--mca btl_tcp_if_include' '--mca' needs a "
            "parameter name and a value",
        ),
        (
            {"mpi": {"enabled": True}, "torch_distributed": {"enabled": True}},
            "distribution: torch_distributed and mpi are all enabled. Fix: enable one way",
        ),
    ],
)
def test_load_enforces_the_distribution_rules(distribution: dict[str, Any], expected: str) -> None:
    found = problems({"hosts": 2, "processes_per_host": 2, "distribution": distribution})
    assert any(expected in p for p in found), found


def test_load_warns_that_partitions_is_deprecated() -> None:
    found = warnings_of(
        {
            "distribution": {
                "smdistributed": {
                    "modelparallel": {"enabled": True, "parameters": {"partitions": 1}}
                }
            }
        }
    )
    assert (
        "distribution.smdistributed.modelparallel.parameters.partitions: is deprecated. Fix: "
        "rename it to pipeline_parallel_degree" in found
    )


def test_load_rejects_more_processes_than_gpus_on_a_gpu_instance() -> None:
    assert problems({"instance_type": "ml.p3.8xlarge", "processes_per_host": 8}) == [
        "processes_per_host: 8 processes per host exceed the 4 GPUs of p3.8xlarge. Fix: use at "
        "most 4 (one process per GPU)"
    ]


def test_load_only_warns_about_more_processes_than_cores_on_a_local_cpu_host() -> None:
    import os

    found = warnings_of({"processes_per_host": (os.cpu_count() or 1) + 1})
    assert any("CPU cores: they will share cores" in w for w in found)


def test_processes_per_host_must_agree_with_mpi() -> None:
    assert problems(
        {
            "processes_per_host": 2,
            "distribution": {"mpi": {"enabled": True, "processes_per_host": 4}},
        }
    ) == [
        "processes_per_host: 2 differs from distribution.mpi.processes_per_host (4). "
        "Fix: set one of them"
    ]


def test_environment_cannot_override_what_tenter_sets() -> None:
    assert problems({"environment": {"RANK": "3", "OMP_NUM_THREADS": 2}}) == [
        "environment.RANK: is set by tenter for every process and cannot be overridden. Fix: "
        "remove it"
    ]


def test_unknown_backend_is_named_with_the_choices() -> None:
    (found,) = problems({"backend": "locla"})
    assert found.startswith("backend: 'locla' is not a launch backend. Fix: choose one of: local")
    assert found.endswith("Did you mean 'local'?")


@pytest.mark.parametrize(
    ("elastic", "expected"),
    [
        (
            {"min_hosts": 3},
            "elastic: instance_count 2 must lie between min_hosts (3) and max_hosts",
        ),
        (
            {"rendezvous": {"backend": "etcd"}},
            "elastic.rendezvous.endpoint: is required with backend etcd. Fix: give the etcd "
            "server's host:port",
        ),
        (
            {"rendezvous": {"endpoint": "h:1"}},
            "elastic.rendezvous.endpoint: is only for etcd; the c10d store is served by the job",
        ),
        ({"on_hang": "restart"}, "elastic.on_hang: restart needs max_restarts >= 1"),
        (
            {"rendezvous": {"backend": "zookeeper"}},
            "elastic.rendezvous.backend: 'zookeeper' is not 'c10d' or 'etcd'",
        ),
    ],
)
def test_load_enforces_the_elastic_rules(elastic: dict[str, Any], expected: str) -> None:
    found = problems({"hosts": 2, "elastic": elastic})
    assert any(p.startswith(expected) for p in found), found


def test_process_group_backend_is_checked_against_the_instance_type() -> None:
    assert problems({"instance_type": "ml.c5.18xlarge", "process_group_backend": "nccl"}) == [
        "process_group_backend: nccl needs GPUs and c5.18xlarge has none. Fix: use tenter "
        "or gloo for CPU tensors (or auto)"
    ]
    (found,) = problems({"process_group_backend": "ncl"})
    assert found == (
        "process_group_backend: 'ncl' is not 'auto', 'gloo', 'nccl' or 'tenter'. Fix: make it "
        "'auto', 'gloo', 'nccl' or 'tenter'"
    )
