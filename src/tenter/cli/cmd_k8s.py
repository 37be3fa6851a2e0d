"""``tenter k8s``: the EKS cluster and the Kubernetes jobs around ``--backend kubernetes``.

    tenter k8s cluster-config --name train --region us-west-2 --instance-type p5.48xlarge \\
        --nodes 2 --azs us-west-2a,us-west-2b > cluster.yaml
    tenter k8s nccl-tests --instance-type p5.48xlarge --nodes 2 --image IMAGE | kubectl apply -f -
    tenter k8s status JOB [--namespace NS]   # tenter status JOB, also for jobs started elsewhere
    tenter k8s cancel JOB [--namespace NS]   # tenter cancel JOB, likewise

Jobs themselves run with ``tenter run --backend kubernetes job.yaml``; see docs/kubernetes.md.
"""

from __future__ import annotations

import argparse
import re
from functools import partial
from pathlib import Path
from typing import Any

from tenter.perf.options import COLLECTIVES, parse_size

_REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
_CLUSTER_NAME = re.compile(r"^[a-zA-Z][-a-zA-Z0-9]*$")
NCCL_TESTS_BIN = "/opt/nccl-tests/build"
"""Where ``tenter container`` builds nccl-tests in the image."""


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "k8s",
        help="EKS cluster config, nccl-tests job, status and cancel of Kubernetes jobs",
        description="Generate an eksctl ClusterConfig with EFA, an nccl-tests MPIJob, or "
        "inspect and cancel jobs started with --backend kubernetes.",
    )
    k8s = parser.add_subparsers(dest="k8s_command", metavar="COMMAND", required=True)

    cfg = k8s.add_parser(
        "cluster-config",
        help="an eksctl ClusterConfig with an EFA node group",
        description="Print an eksctl ClusterConfig (eksctl.io/v1alpha5): one managed node "
        "group of the instance type in private subnets, efaEnabled when the type has EFA.",
    )
    cfg.add_argument("--name", required=True, help="cluster name")
    cfg.add_argument("--region", required=True, help="AWS region, e.g. us-west-2")
    cfg.add_argument("--instance-type", required=True, metavar="TYPE", help="e.g. p5.48xlarge")
    cfg.add_argument("--nodes", type=int, required=True, metavar="N", help="nodes in the group")
    cfg.add_argument(
        "--azs", metavar="AZ,AZ", help="availability zones (at least 2; nodes go to the first)"
    )
    cfg.add_argument(
        "--volume-size", type=int, default=500, metavar="GIB", help="node root volume (GiB)"
    )
    cfg.add_argument("--version", help="Kubernetes version (default: eksctl's)")
    cfg.add_argument("--out", metavar="FILE", help="write the config here instead of stdout")
    cfg.set_defaults(func=partial(cluster_config, cfg))

    nccl = k8s.add_parser(
        "nccl-tests",
        help="an MPIJob running nccl-tests (or tenter perf) across nodes",
        description="Print the MPIJob of a collective benchmark on NODES nodes of TYPE, one "
        "rank per GPU, with the same EFA settings as training jobs.",
    )
    nccl.add_argument("--instance-type", required=True, metavar="TYPE", help="e.g. p5.48xlarge")
    nccl.add_argument("--nodes", type=int, required=True, metavar="N", help="number of nodes")
    nccl.add_argument("--image", required=True, help="image with nccl-tests and tenter")
    nccl.add_argument("--namespace", default="default", help="namespace (default: default)")
    nccl.add_argument("--name", default="nccl-tests", help="job name (default: nccl-tests)")
    nccl.add_argument(
        "--workload",
        choices=("nccl-tests", "tenter-perf"),
        default="nccl-tests",
        help=f"nccl-tests' binary (in {NCCL_TESTS_BIN}) or `tenter perf` (default: nccl-tests)",
    )
    nccl.add_argument("--collective", choices=COLLECTIVES, default="all_reduce")
    nccl.add_argument("-b", "--minbytes", default="8", help="smallest size (default 8)")
    nccl.add_argument("-e", "--maxbytes", default="16G", help="largest size (default 16G)")
    nccl.add_argument("-f", "--stepfactor", default="2", help="size factor (default 2)")
    nccl.add_argument("--out", metavar="FILE", help="write the MPIJob here instead of stdout")
    nccl.set_defaults(func=partial(nccl_tests, nccl))

    for verb, text in (("status", "show a job's state and pods"), ("cancel", "delete a job")):
        cmd = k8s.add_parser(verb, help=text, description=f"{text[0].upper()}{text[1:]}.")
        cmd.add_argument("job", metavar="JOB", help="the job id (the object's name)")
        cmd.add_argument("--namespace", default="default", help="namespace (default: default)")
        cmd.add_argument("--context", help="kubeconfig context (default: the current one)")
        cmd.set_defaults(func=status if verb == "status" else cancel)


def _catalog_type(parser: argparse.ArgumentParser, name: str) -> Any:
    from tenter.errors import with_fix
    from tenter.spec import lookup
    from tenter.spec.catalog import unknown_type

    itype = lookup(name)
    if itype is None:
        parser.error(f"--instance-type {with_fix(*unknown_type(name))}")
    if itype.is_local:
        parser.error(
            f"--instance-type {name}: this machine, not a catalog type (ml.p5.48xlarge...)"
        )
    return itype


def _emit(text: str, out: str | None) -> None:
    if out:
        Path(out).write_text(text)
    else:
        print(text, end="")


def cluster_config(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    from tenter.cli.parsing import stderr
    from tenter.errors import with_fix
    from tenter.launch.backends.kubernetes import eksctl
    from tenter.launch.backends.kubernetes import rules as k8s_rules
    from tenter.launch.backends.kubernetes.request import to_yaml

    if not _CLUSTER_NAME.match(args.name) or len(args.name) > 100:
        parser.error(
            f"--name {args.name}: eksctl cluster names start with a letter and hold letters, "
            "digits and '-' (at most 100)"
        )
    if not _REGION.match(args.region):
        parser.error(f"--region {args.region}: not an AWS region name; e.g. us-west-2")
    if args.nodes < 1:
        parser.error(f"--nodes {args.nodes}: a node group needs at least 1 node")
    if args.volume_size < 20:
        parser.error(f"--volume-size {args.volume_size}: give at least 20 GiB (the AMI's size)")
    azs = [az.strip() for az in args.azs.split(",")] if args.azs else []
    for az in azs:
        if not (az.startswith(args.region) and len(az) > len(args.region)):
            parser.error(
                f"--azs {args.azs}: '{az}' is not a zone of {args.region}; write zones like "
                f"{args.region}a,{args.region}b"
            )
    itype = _catalog_type(parser, args.instance_type)
    config = eksctl.cluster_config(
        args.name, args.region, itype, args.nodes, azs, args.volume_size, args.version
    )
    problems = k8s_rules.problems(config)
    if problems:
        parser.error("--azs: " + "; ".join(with_fix(p.message, p.fix) for p in problems))
    _emit(to_yaml([config]), args.out)
    if not itype.efa:
        stderr.print(f"[yellow]note:[/] {itype.name} has no EFA: NCCL will use TCP sockets")
    stderr.print(eksctl.device_plugin_hint(itype), markup=False)
    return 0


def nccl_tests(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    for flag, value in (("-b", args.minbytes), ("-e", args.maxbytes)):
        try:
            parse_size(value)
        except argparse.ArgumentTypeError as e:
            parser.error(f"{flag} {value}: {e}")
    if not args.stepfactor.isdigit() or int(args.stepfactor) < 1:
        parser.error(f"-f {args.stepfactor}: the size factor is a whole number >= 1, e.g. 2")
    if args.nodes < 1:
        parser.error(f"--nodes {args.nodes}: the benchmark needs at least 1 node")
    itype = _catalog_type(parser, args.instance_type)
    sizes = ["-b", args.minbytes, "-e", args.maxbytes, "-f", args.stepfactor]
    entry: dict[str, Any]
    if args.workload == "nccl-tests":
        # -g 1: one GPU per rank; mpirun starts one rank per GPU.
        entry = {"command": [f"{NCCL_TESTS_BIN}/{args.collective}_perf", *sizes, "-g", "1"]}
    else:
        # GPU nodes: benchmark NCCL on the GPUs, not gloo on the CPUs.
        device = ["--device", "cuda"] if itype.gpus else []
        entry = {"module": "tenter.perf", "args": [args.collective, *sizes, *device]}

    from tenter.launch.backends.kubernetes import KubernetesBackend
    from tenter.spec import load

    spec, _ = load(
        {
            "name": args.name,
            **entry,
            "instance_count": args.nodes,
            "instance_type": itype.sagemaker_name,
            "distribution": {"mpi": {"enabled": True}},
            "backend": "kubernetes",
            "kubernetes": {"image": args.image, "namespace": args.namespace, "kind": "MPIJob"},
        },
        base_dir=Path.cwd(),
    )
    _emit(str(KubernetesBackend().dryrun(spec, args.name)), args.out)
    return 0


def _handle(args: argparse.Namespace) -> Any:
    """The job's handle: from its job directory when this machine submitted it, else found by
    name on the cluster (a job started elsewhere)."""
    from tenter.errors import JobNotFoundError
    from tenter.jobdir.lookup import open_handle
    from tenter.launch.backends.kubernetes import KubernetesBackend

    try:
        return KubernetesBackend(), open_handle(args.job)
    except JobNotFoundError:
        backend = KubernetesBackend()
        return backend, backend.find(args.job, args.namespace, args.context)


def status(args: argparse.Namespace) -> int:
    """``tenter k8s status JOB``: ``tenter status JOB`` for jobs this machine did not submit."""
    backend, handle = _handle(args)
    print(f"{args.job}  {backend.status(handle).text}")
    return 0


def cancel(args: argparse.Namespace) -> int:
    """``tenter k8s cancel JOB``: ``tenter cancel JOB`` for jobs this machine did not submit."""
    backend, handle = _handle(args)
    backend.cancel(handle)
    return 0
