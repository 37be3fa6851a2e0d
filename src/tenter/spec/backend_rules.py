"""The rules of the per-backend blocks (``slurm``, ``mpirun``) that depend on the rest of the
spec: a block for another backend is ignored (a warning, as TorchX warns of a run option its
scheduler does not take), a directive tenter writes itself cannot be given twice, a hostfile
needs real hosts, and what the mpi backend cannot do on them is refused."""

from __future__ import annotations

from pathlib import Path

from tenter.spec.catalog import InstanceType
from tenter.spec.errors import FieldError, Problem
from tenter.spec.job import JobSpec
from tenter.spec.limits import key_path
from tenter.spec.mpirun import hostfile_hosts

SBATCH_SET_BY_TENTER = (
    "job-name", "nodes", "ntasks", "ntasks-per-node", "cpus-per-task", "gpus", "gpus-per-node",
    "time", "signal", "output", "error", "chdir", "array", "wrap",
)  # fmt: skip
"""sbatch options the script sets from the spec (or that would change what it is)."""
SBATCH_FIELDS = {
    "partition": "partition",
    "account": "account",
    "qos": "qos",
    "constraint": "constraint",
    "reservation": "reservation",
    "exclusive": "exclusive",
    "container-image": "container_image",
    "container-mounts": "container_mounts",
}
"""sbatch/pyxis options that are fields of the ``slurm`` block."""


def _slurm_problems(spec: JobSpec) -> list[Problem]:
    out = []
    seen: set[str] = set()
    for i, directive in enumerate(spec.slurm.extra_directives):
        path = key_path("slurm.extra_directives", i)
        option = directive.removeprefix("--").partition("=")[0]
        if option in SBATCH_FIELDS:
            out.append(
                Problem(
                    path,
                    f"'{directive}' is a field of the slurm block",
                    f"set slurm.{SBATCH_FIELDS[option]} instead",
                )
            )
        elif option in SBATCH_SET_BY_TENTER:
            out.append(
                Problem(
                    path,
                    f"'{directive}': tenter sets --{option} from the spec (`tenter plan "
                    "--backend slurm` shows it)",
                    "change the spec's field instead",
                )
            )
        elif option in seen:
            out.append(Problem(path, f"'--{option}' is given twice", "keep one"))
        seen.add(option)
    if spec.slurm.container_mounts and not spec.slurm.container_image:
        out.append(Problem("slurm.container_mounts", "need slurm.container_image", "set it"))
    return out


def _mpirun_problems(spec: JobSpec, itype: InstanceType) -> list[Problem]:
    out = []
    try:
        custom = spec.distribution.user_mpi_options().mca
    except ValueError:  # malformed: distribution's own rules report it
        custom = {}
    for name in spec.mpirun.mca:
        if name in custom:
            out.append(
                Problem(
                    f"mpirun.mca.{name}",
                    f"is also set in custom_mpi_options ('{custom[name]}')",
                    "keep one",
                )
            )
    simulated = itype.is_local or spec.isolation != "none"
    if spec.mpirun.network_interface and simulated:
        out.append(
            Problem(
                "mpirun.network_interface",
                f"'{spec.mpirun.network_interface}': hosts simulated on this machine use "
                f"{'loopback' if itype.is_local else 'eth0 of their own namespaces'}",
                "set a catalog instance_type with isolation: none for real hosts, or remove it",
            )
        )
    if spec.mpirun.hostfile:
        path = "mpirun.hostfile"
        if simulated:
            out.append(
                Problem(
                    path,
                    "names real hosts, and instance_type local simulates them on this machine",
                    "set a catalog instance_type (e.g. ml.p4d.24xlarge) with isolation: none",
                )
            )
        else:
            try:
                hosts = hostfile_hosts(Path(spec.mpirun.hostfile))
            except FieldError as e:
                out.append(Problem(path, e.what, e.fix))
            else:
                if len(hosts) < spec.instance_count:
                    out.append(
                        Problem(
                            path,
                            f"lists {len(hosts)} hosts and the job needs instance_count "
                            f"{spec.instance_count}",
                            "add hosts or lower instance_count",
                        )
                    )
    # mpirun starts one fixed MPI world and ends it when a rank fails: no agent restarts a
    # group, and on real hosts no launcher process can read a rank's stacks.
    if spec.elastic.max_restarts:
        out.append(
            Problem(
                "elastic.max_restarts",
                f"{spec.elastic.max_restarts}: the mpi backend cannot restart ranks (mpirun ends "
                "the whole job when one fails)",
                "use backend local or slurm, or set it to 0 and resume from the last checkpoint "
                "with a new run",
            )
        )
    if spec.elastic.hang_timeout and not (itype.is_local or spec.isolation != "none"):
        out.append(
            Problem(
                "elastic.hang_timeout",
                f"on {itype.name} hosts mpirun's ranks run where the launcher cannot read their "
                "stacks for a hang report",
                "use backend slurm (one tenter agent per host), or remove it",
            )
        )
    return out


def _ignored(spec: JobSpec, block: str, backend: str) -> list[Problem]:
    """A warning for each field of ``block`` set on a job of another backend."""
    if spec.backend == backend:
        return []
    options = getattr(spec, block)
    return [
        Problem(
            f"{block}.{name}",
            f"is for backend {backend}, ignored on {spec.backend}",
            f"remove it, or set backend: {backend}",
        )
        for name in sorted(options.model_fields_set)
    ]


def _ray_problems(spec: JobSpec) -> list[Problem]:
    """A ``ray`` block elsewhere is an error, not a warning: its default starts a Ray cluster,
    which a job of another backend would silently not get."""
    if spec.backend == "ray":
        return []
    return [
        Problem(
            f"ray.{name}",
            f"is for backend ray, and this job runs on {spec.backend}",
            "remove the ray block, or set backend: ray (--backend ray)",
        )
        for name in sorted(spec.ray.model_fields_set)
    ]


def backend_problems(spec: JobSpec, itype: InstanceType) -> tuple[list[Problem], list[Problem]]:
    """The per-backend rules: (errors, warnings)."""
    errors = _slurm_problems(spec) + _ray_problems(spec)
    if spec.backend == "mpi":
        errors += _mpirun_problems(spec, itype)
    warnings = _ignored(spec, "slurm", "slurm") + _ignored(spec, "mpirun", "mpi")
    return errors, warnings
