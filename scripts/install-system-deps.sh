#!/usr/bin/env bash
# Debian packages the tests need; idempotent: installs only what is missing.
#   libfabric-bin: the real fi_info, whose output the doctor's libfabric check parses.
#   openmpi-bin: the real mpirun that the mpi backend's tests launch jobs through.
#   slurm-wlm, munge: a real single-node Slurm cluster (slurmctld + slurmd, authenticated by
#     munged) that tests/launch/slurm_cluster.py starts for the slurm backend's tests.
#   etcd-server: a real etcd 3.4 (v2 API) for torch elastic's etcd rendezvous tests.
# Run as root (CI is); `apt-get update` runs once, and only when something is missing.
set -euo pipefail

PACKAGES=(libfabric-bin openmpi-bin slurm-wlm munge etcd-server)

missing=()
for pkg in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
if [ "${#missing[@]}" -eq 0 ]; then
    echo "system packages present: ${PACKAGES[*]}"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "error: missing ${missing[*]}; run this script as root to install them" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "installed: ${missing[*]}"
