"""The per-backend blocks of the spec (``slurm``, ``mpirun``): each value checked alone, then
against the rest of the spec; a bad one is exit 2 naming the field, with nothing written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tenter.contract.placeholders import SLURM_NIC
from tenter.launch.api import get_backend
from tenter.spec import SpecError, load
from tests.conftest import REPO, SCRIPTS, tenter

BASE: dict[str, Any] = {"entry_point": "contract.py", "source_dir": str(SCRIPTS)}


def problems(fields: dict[str, Any]) -> list[str]:
    with pytest.raises(SpecError) as info:
        load({**BASE, **fields}, REPO)
    return [str(p) for p in info.value.problems]


def warnings(fields: dict[str, Any]) -> list[str]:
    _, found = load({**BASE, **fields}, REPO)
    return [str(w) for w in found]


@pytest.mark.parametrize(
    ("slurm", "message"),
    [
        ({"partiton": "gpu"}, "slurm.partiton: unknown field. Fix: rename it to 'partition'"),
        (
            {"partition": "gpu;rm -rf /"},
            "slurm.partition: 'gpu;rm -rf /' holds ' ', ';', which could break out of its "
            "#SBATCH line. Fix: use letters, digits and _ . , : / @ % + = # -",
        ),
        (
            {"account": "a\n#SBATCH --uid=0"},
            "slurm.account: 'a\\n#SBATCH --uid=0' holds '\\n', ' ', which could break out",
        ),
        ({"qos": ""}, "slurm.qos: is empty. Fix: give a value or remove the field"),
        ({"exclusive": "yes"}, "slurm.exclusive: 'yes' is not a valid"),
        ({"constraint": "h100 && $(id)"}, "slurm.constraint: 'h100 && $(id)' is invalid"),
        (
            {"extra_directives": ["--mail-type=END\n--uid=0"]},
            "slurm.extra_directives.0: '--mail-type=END\\n--uid=0' holds a newline. Fix: give "
            "one directive per item",
        ),
        (
            {"extra_directives": ["mail-type=END"]},
            "slurm.extra_directives.0: 'mail-type=END' is not a long sbatch option",
        ),
        (
            {"extra_directives": ["--comment=`id`"]},
            "slurm.extra_directives.0: '`id`' holds '`', which could break out",
        ),
        (
            {"container_image": "img", "container_mounts": [{"source": "fsx", "target": "/f"}]},
            "slurm.container_mounts.0.source: 'fsx' is not an absolute path. Fix: give one, e.g. "
            "/fsx",
        ),
    ],
)
def test_slurm_value_is_refused_naming_its_field_if_unsafe_or_mistyped(
    slurm: dict[str, Any], message: str
) -> None:
    found = problems({"backend": "slurm", "slurm": slurm})
    assert len(found) == 1 and found[0].startswith(message), found


@pytest.mark.parametrize(
    ("directive", "message"),
    [
        (
            "--partition=gpu",
            "'--partition=gpu' is a field of the slurm block. Fix: set slurm.partition",
        ),
        ("--nodes=4", "'--nodes=4': tenter sets --nodes from the spec"),
        (
            "--container-image=x",
            "'--container-image=x' is a field of the slurm block. Fix: set slurm.container_image",
        ),
    ],
)
def test_extra_directive_is_refused_if_tenter_or_a_field_sets_it(
    directive: str, message: str
) -> None:
    found = problems({"backend": "slurm", "slurm": {"extra_directives": [directive]}})
    assert found == [f"slurm.extra_directives.0: {message}" + found[0].split(message)[1]]


def test_repeated_directive_and_mounts_without_image_are_refused() -> None:
    found = problems(
        {
            "backend": "slurm",
            "slurm": {
                "extra_directives": ["--mail-type=END", "--mail-type=FAIL"],
                "container_mounts": [{"source": "/fsx", "target": "/fsx"}],
            },
        }
    )
    assert found == [
        "slurm.extra_directives.1: '--mail-type' is given twice. Fix: keep one",
        "slurm.container_mounts: need slurm.container_image. Fix: set it",
    ]


def test_a_block_for_another_backend_is_a_warning_that_it_is_ignored() -> None:
    assert warnings({"slurm": {"partition": "gpu"}, "mpirun": {"mca": {"pml": "ob1"}}}) == [
        "slurm.partition: is for backend slurm, ignored on local. Fix: remove it, or set "
        "backend: slurm",
        "mpirun.mca: is for backend mpi, ignored on local. Fix: remove it, or set backend: mpi",
    ]


def _hostfile(tmp_path: Path, text: str) -> str:
    path = tmp_path / "hosts"
    path.write_text(text)
    return str(path)


def test_mpirun_rules_name_the_field(tmp_path: Path) -> None:
    mpi = {"backend": "mpi", "instance_type": "ml.p3.8xlarge", "instance_count": 3}
    assert problems(
        {**mpi, "mpirun": {"hostfile": _hostfile(tmp_path, "n1 slots=4\n# c\nn2 slots=4\n")}}
    ) == [
        "mpirun.hostfile: lists 2 hosts and the job needs instance_count 3. Fix: add hosts or "
        "lower instance_count"
    ]
    assert problems({**mpi, "mpirun": {"hostfile": _hostfile(tmp_path, "n1 slots=4 ; id\n")}}) == [
        f"mpirun.hostfile: '{tmp_path / 'hosts'}' line 1: 'n1 slots=4 ; id' is not 'HOST "
        "[slots=N]'. Fix: write one host per line, with slots=N if it runs several ranks"
    ]
    assert problems({"backend": "mpi", "mpirun": {"hostfile": "/nonexistent"}})[0].startswith(
        "mpirun.hostfile: names real hosts, and instance_type local simulates them"
    )
    assert problems({**mpi, "mpirun": {"mca": {"BTL": "tcp"}}}) == [
        "mpirun.mca: 'BTL' is not an MCA parameter name. Fix: use lower-case letters, digits "
        "and '_' (e.g. btl_tcp_if_include)"
    ]
    custom = {"mpi": {"enabled": True, "custom_mpi_options": "--mca pml ob1"}}
    assert problems({**mpi, "distribution": custom, "mpirun": {"mca": {"pml": "ucx"}}}) == [
        "mpirun.mca.pml: is also set in custom_mpi_options ('ob1'). Fix: keep one"
    ]


def test_mpi_refuses_restarts_and_a_hang_report_it_cannot_give() -> None:
    found = problems(
        {
            "backend": "mpi",
            "instance_type": "ml.p3.8xlarge",
            "elastic": {"max_restarts": 2, "hang_timeout": 60},
        }
    )
    assert [f.split(":")[0] for f in found] == ["elastic.max_restarts", "elastic.hang_timeout"]
    assert "cannot restart ranks (mpirun ends the whole job when one fails)" in found[0]
    assert "cannot read their stacks" in found[1]
    # Simulated hosts are this machine's processes: the launcher reads their stacks.
    assert warnings({"backend": "mpi", "elastic": {"hang_timeout": 60}}) == []


def test_bad_flag_value_exits_2_naming_the_field_and_writes_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    done = tenter(
        "plan", "--backend", "slurm", "--partition", "gpu$(id)", "--output-dir", str(home),
        str(SCRIPTS / "contract.py"),
    )  # fmt: skip
    assert done.returncode == 2
    assert "slurm.partition: 'gpu$(id)' holds '$', '(', ')'" in done.stderr
    assert "Traceback" not in done.stderr and not home.exists()


def test_network_interface_is_a_name_and_only_for_real_hosts() -> None:
    bad = "is not a network interface name. Fix: give 1 to 15 letters, digits and _ . : -"
    real = {"backend": "mpi", "instance_type": "ml.p4d.24xlarge"}
    assert problems({**real, "mpirun": {"network_interface": "eth0; id"}}) == [
        f"mpirun.network_interface: 'eth0; id' {bad} (e.g. eth0, ens5; `ip -br addr` on a "
        "host lists them)"
    ]
    assert problems({"backend": "slurm", "slurm": {"network_interface": "x" * 16}})[0].startswith(
        f"slurm.network_interface: '{'x' * 16}' {bad}"
    )
    assert problems({"backend": "mpi", "mpirun": {"network_interface": "ens5"}}) == [
        "mpirun.network_interface: 'ens5': hosts simulated on this machine use loopback. Fix: set "
        "a catalog instance_type with isolation: none for real hosts, or remove it"
    ]


@pytest.mark.parametrize(
    ("backend", "block", "expected"),
    [
        ("mpi", {}, "eth0"),  # SageMaker's name, mpirun's ranks cannot learn it
        ("mpi", {"mpirun": {"network_interface": "ens5"}}, "ens5"),
        ("slurm", {}, SLURM_NIC),  # learned on each node: its NodeAddr's interface
        ("slurm", {"slurm": {"network_interface": "ens5"}}, "ens5"),
    ],
)
def test_real_hosts_sockets_use_the_given_interface_or_the_backends_default(
    backend: str, block: dict[str, Any], expected: str
) -> None:
    fields = {"backend": backend, "instance_type": "ml.p4d.24xlarge", "instance_count": 2}
    spec, _ = load({**BASE, **fields, **block}, REPO)
    plan = get_backend(backend).dryrun(spec, "nic-1")
    host = plan.hosts[1]
    env = plan.process_env(host, host.ranks[0])
    assert (env["NCCL_SOCKET_IFNAME"], env["SM_NETWORK_INTERFACE_NAME"]) == (expected, expected)
    if backend == "mpi":
        argv = " ".join(plan.launcher)
        assert f"btl_tcp_if_include {expected}" in argv
        assert f"oob_tcp_if_include {expected}" in argv


@pytest.mark.parametrize(
    ("runtime_env", "message"),
    [
        ({"pip": ["numpy"]}, "ray.runtime_env.pip: unknown field. Fix: remove it"),
        (
            {"env_vars": {"1X": "a"}},
            "ray.runtime_env.env_vars.1X: is not a variable name",
        ),
        ({"env_vars": {"RANK": "3"}}, "ray.runtime_env.env_vars.RANK: is set by tenter"),
        (
            {"env_vars": {"A": "2"}},
            "ray.runtime_env.env_vars.A: is also environment.A, with another value. Fix: give "
            "the variable in one of the two",
        ),
        ({"env_vars": {"A": 2}}, "ray.runtime_env.env_vars.A: 2 is not a valid string"),
    ],
)
def test_ray_runtime_env_is_refused_naming_its_field(
    runtime_env: dict[str, Any], message: str
) -> None:
    fields = {"backend": "ray", "environment": {"A": "1"}, "ray": {"runtime_env": runtime_env}}
    assert any(p.startswith(message) for p in problems(fields)), problems(fields)


def test_ray_runtime_env_vars_are_every_ranks_and_rays_in_the_plan() -> None:
    spec, _ = load(
        {**BASE, "backend": "ray", "ray": {"runtime_env": {"env_vars": {"B": "1"}}}}, REPO
    )
    plan = get_backend("ray").dryrun(spec, "j-1")
    assert all(plan.process_env(h, r)["B"] == "1" for h in plan.hosts for r in h.ranks)
    for file in ("ray.json", "ray-job.json"):
        assert '"env_vars": {\n      "B": "1"\n    }' in plan.files[file], file
