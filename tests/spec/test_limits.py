"""The size bounds of a spec, in process: what they refuse, what they still accept, and
that the limits fit what Linux passes to a process."""

from __future__ import annotations

import json
import os
from pathlib import Path, PurePath
from typing import Any

import pytest

from tenter.contract import sagemaker as contract
from tenter.spec import Problem, SpecError, limits, load, load_file
from tenter.spec.errors import MAX_LINE

HERE = Path(__file__).parent
MAX_ARG_STRLEN = 131_072
"""Linux's limit on one argument or ``NAME=value`` string (32 pages), in bytes."""


def spec(**fields: Any) -> dict[str, Any]:
    return {"entry_point": Path(__file__).name, "source_dir": str(HERE), **fields}


def problems(data: dict[str, Any], overrides: dict[str, Any] | None = None) -> list[str]:
    with pytest.raises(SpecError) as info:
        load(data, HERE, overrides)
    return [str(p) for p in info.value.problems]


def test_report_lists_ten_problems_and_counts_the_rest() -> None:
    text = str(SpecError([Problem(f"k{i}", "unknown field") for i in range(25)]))
    lines = text.splitlines()
    assert lines[0] == "the job spec has 25 problems:"
    assert lines[1:3] == ["  - k0: unknown field", "  - k1: unknown field"]
    assert lines[-1] == "  ... and 15 more" and len(lines) == 12


def test_a_problem_is_cut_to_max_line_characters() -> None:
    text = str(Problem("args.0", "x" * 100_000))
    assert len(text) == MAX_LINE and text.endswith("... (100,008 chars)")


def test_load_refuses_a_dict_that_contains_itself() -> None:
    # The Python API (the Estimator) can pass what YAML's `&a [*a]` makes: a cycle.
    loop: dict[str, Any] = {}
    loop["again"] = loop
    (found,) = problems(spec(hyperparameters={"loop": loop}))
    assert found.startswith("hyperparameters.loop.again.again.again")
    assert "is nested more than 32 levels deep" in found


def test_load_refuses_a_dict_nested_5000_deep_without_recursing() -> None:
    deep: list[Any] = []
    for _ in range(5000):
        deep = [deep]
    (found,) = problems(spec(hyperparameters={"deep": deep}))
    assert found.startswith("hyperparameters.deep.0.0.0")


def test_load_counts_a_shared_value_each_time_it_is_used() -> None:
    shared = ["x"] * 1000
    (found,) = problems(spec(hyperparameters={f"h{i}": shared for i in range(101)}))
    assert found.startswith("hyperparameters.h99: makes the spec hold more than 100,000 values")


def test_load_lists_every_nul_and_oversized_string() -> None:
    assert problems(spec(args=["a\0b", "x" * (limits.MAX_TEXT + 1)], name="ok")) == [
        "args.0: contains a NUL character, which no argument, variable or path can hold. Fix: "
        "remove it",
        f"args.1: is {limits.MAX_TEXT + 1:,} characters long; a spec value may have at most "
        f"{limits.MAX_TEXT:,} (Linux refuses longer arguments and variables). Fix: pass "
        "large data as a file (a channel)",
    ]


def test_a_flag_replaces_the_field_the_file_gives_under_its_other_name() -> None:
    loaded, _ = load(spec(hosts=2), HERE, {"instance_count": 3})
    assert loaded.instance_count == 3


def test_environment_numbers_become_text_and_booleans_are_refused() -> None:
    loaded, _ = load(spec(environment={"OMP_NUM_THREADS": 1, "SCALE": 0.5}), HERE)
    assert loaded.environment == {"OMP_NUM_THREADS": "1", "SCALE": "0.5"}
    (found,) = problems(spec(environment={"WANDB_SILENT": True}))
    assert found.startswith("environment.WANDB_SILENT: True is a YAML boolean")


def test_load_file_accepts_a_merge_key_that_a_mapping_overrides(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        f"entry_point: {Path(__file__).name}\nsource_dir: {HERE}\n"
        "environment:\n  <<: &defaults {A: '1', B: '2'}\n  A: '3'\n"
    )
    loaded, _ = load_file(path)
    assert loaded.environment == {"A": "3", "B": "2"}


def test_more_processes_than_a_host_s_memory_can_run_are_refused() -> None:
    assert problems(
        spec(instance_type="ml.c5.18xlarge", backend="mpi", processes_per_host=1000)
    ) == [
        "processes_per_host: 1,000 processes (processes_per_host) on one c5.18xlarge host "
        "exceed the 576 its 144 GiB of memory can run (a worker needs 256 MiB at the least). "
        "Fix: use fewer"
    ]


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("etcd:99999", "elastic.rendezvous.endpoint: 99999 is not a TCP port. Fix: use 1 to 65535"),
        (
            "etcd",
            "elastic.rendezvous.endpoint: 'etcd' is not host:port. Fix: write e.g. "
            "etcd.example.com:2379",
        ),
    ],
)
def test_the_etcd_endpoint_must_be_host_and_port(endpoint: str, expected: str) -> None:
    found = problems(spec(elastic={"rendezvous": {"backend": "etcd", "endpoint": endpoint}}))
    assert found == [expected]


def test_the_local_backend_bounds_the_hosts_an_elastic_job_may_grow_to() -> None:
    assert problems(spec(elastic={"max_hosts": 200})) == [
        "elastic.max_hosts: 200 hosts exceed the 156 the local backend simulates on this "
        "machine. Fix: use fewer, or a cluster backend (mpi, slurm, kubernetes)"
    ]


def test_port_problem_accepts_zero_only_where_the_kernel_picks() -> None:
    assert limits.port_problem("--metrics-port", 0, zero_picks_one=True) is None
    assert limits.port_problem("--metrics-port", 65535) is None
    assert str(limits.port_problem("--metrics-port", 0)) == (
        "--metrics-port: 0 is not a TCP port. Fix: use 1 to 65535"
    )


def test_the_largest_spec_fits_what_linux_passes_to_a_process() -> None:
    """MAX_HOSTS hosts and the largest hyperparameters, args and environment: every string
    within MAX_ARG_STRLEN, and all of them within ARG_MAX."""
    hosts = contract.host_names(limits.MAX_HOSTS)
    # One value of the largest allowed total: JSON-encoded, it fills the budget exactly.
    hyperparameters = {"h": "x" * (limits.MAX_HYPERPARAMETERS_BYTES - len('{"h": ""}'))}
    env = contract.sagemaker_env(
        job_name="j" * 63,
        current_host=hosts[-1],
        hosts=hosts,
        host_dir=PurePath("/" + "d" * 200),
        instance_type="ml.p5.48xlarge",
        num_gpus=8,
        num_cpus=192,
        num_neurons=0,
        network_interface="eth0",
        hyperparameters=hyperparameters,
        channels={"train": "/" + "c" * 200},
        entry_point="train.py",
        module_dir="/opt/ml/code",
        distribution={},
    )
    strings = [f"{k}={v}".encode() for k, v in env.items()]
    assert max(len(s) for s in strings) < MAX_ARG_STRLEN
    args = contract.hyperparameter_args(hyperparameters)
    total = sum(len(s) + 1 for s in strings) + sum(len(a) + 1 for a in args)
    total += limits.MAX_ENVIRONMENT_BYTES + limits.MAX_ARGS_BYTES
    assert total < os.sysconf("SC_ARG_MAX") - 256 * 2**10  # room for the launcher's own env
    assert json.dumps(hyperparameters).encode().__len__() == limits.MAX_HYPERPARAMETERS_BYTES
