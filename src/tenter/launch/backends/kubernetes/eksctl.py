"""The EKS cluster a job's manifests run on: an eksctl ``ClusterConfig`` of one managed node
group of an instance type (EFA-enabled where the type has EFA), and what to check once eksctl
made it (``tenter k8s cluster-config``). A pure function of the catalog's instance type."""

from __future__ import annotations

from tenter.launch.backends.kubernetes.kinds import KINDS
from tenter.launch.backends.kubernetes.manifests import Manifest
from tenter.spec.catalog import InstanceType

EKSCTL_API_VERSION = "eksctl.io/v1alpha5"
NODE_VOLUME_GIB = 500
"""Root volume of each node: images of CUDA, NCCL and torch take tens of GiB each."""


def node_group_name(itype: InstanceType) -> str:
    return itype.name.replace(".", "-")


def cluster_config(
    name: str,
    region: str,
    itype: InstanceType,
    nodes: int,
    azs: list[str],
    volume_size: int = NODE_VOLUME_GIB,
    version: str | None = None,
) -> Manifest:
    """An eksctl ``ClusterConfig``: one managed node group of ``nodes`` x ``itype`` in private
    subnets, EFA-enabled when the type has EFA (eksctl then adds every EFA interface, the EFA
    security group and the EFA device plugin). The node group lies in the first of ``azs``:
    eksctl requires an EFA node group to be in one zone, EKS the cluster in at least two."""
    metadata: Manifest = {"name": name, "region": region}
    if version:
        metadata["version"] = version
    group: Manifest = {
        "name": node_group_name(itype),
        "instanceType": itype.name,
        "minSize": nodes,
        "maxSize": nodes,
        "desiredCapacity": nodes,
        "volumeSize": volume_size,
        "privateNetworking": True,
    }
    if itype.efa:
        group["efaEnabled"] = True
    if azs:
        group["availabilityZones"] = azs[:1]
    # The FSx for Lustre CSI driver runs with the nodes' role: volumes claimed from FSx.
    group["iam"] = {"withAddonPolicies": {"fsx": True}}
    config: Manifest = {"apiVersion": EKSCTL_API_VERSION, "kind": "ClusterConfig"}
    config["metadata"] = metadata
    if azs:
        config["availabilityZones"] = azs
    config["iam"] = {"withOIDC": True}
    config["managedNodeGroups"] = [group]
    return config


def device_plugin_hint(itype: InstanceType) -> str:
    """What to check (or install) once eksctl made the cluster."""
    lines = ["create it:  eksctl create cluster -f CLUSTER.yaml"]
    if itype.efa:
        lines += [
            "EFA: eksctl installs the EFA device plugin for efaEnabled node groups; check it with",
            "  kubectl get daemonset -n kube-system aws-efa-k8s-device-plugin-daemonset",
            "  otherwise: helm repo add eks https://aws.github.io/eks-charts && helm install "
            "aws-efa-k8s-device-plugin eks/aws-efa-k8s-device-plugin -n kube-system",
        ]
    if itype.gpus:
        lines += [
            "GPUs: check that nodes offer nvidia.com/gpu:",
            "  kubectl get nodes -o custom-columns=NAME:.metadata.name,"
            "GPU:.status.allocatable.nvidia\\.com/gpu",
            "  otherwise: helm repo add nvdp https://nvidia.github.io/k8s-device-plugin && "
            "helm install nvdp nvdp/nvidia-device-plugin -n kube-system",
        ]
    lines.append(f"jobs: {KINDS['MPIJob'].install}")
    lines.append(f"      {KINDS['PyTorchJob'].install}")
    return "\n".join(lines)
