"""``python -m tenter.launch.kubernetes.mpi_launcher MPIRUN_ARGV...``: an MPIJob's launcher.

The launcher pod of a Kubernetes MPIJob runs this instead of mpirun itself. It serves the
ranks' store (torch elastic's agent store: ``TORCHELASTIC_USE_AGENT_STORE=True``, so every
rank, rank 0 included, is a client) bound to the pod's own address, never to all interfaces:
without it rank 0's ``init_process_group`` would serve the store on every interface of its
pod. The mpi backend's launcher does the same on its first host. The pod's address comes
from the downward API (:data:`POD_IP_ENV`, ``status.podIP``); ``${master_addr}`` and
``${master_port}`` in the argv are resolved with it and the port the kernel picked, by the
contract's one function (:func:`tenter.contract.placeholders.resolve`). Then mpirun runs;
SIGTERM and SIGINT (the pod's deletion, a Ctrl-C) are passed on to it, and the launcher exits
with its status once it ends, the store with it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping

from tenter.contract.placeholders import MASTER_ADDR, MASTER_PORT, resolve
from tenter.errors import ExitCode
from tenter.launch.store import listener_on, serve_store

POD_IP_ENV = "TENTER_POD_IP"


def main(argv: list[str], environ: Mapping[str, str]) -> int:
    addr = environ.get(POD_IP_ENV, "")
    if not argv or not addr:
        print(
            f"error: usage: {POD_IP_ENV}=<the pod's address> python -m {__spec__.name} "
            "MPIRUN_ARGV...; the MPIJob tenter renders sets both",
            file=sys.stderr,
        )
        return int(ExitCode.BAD_INPUT)
    listener = listener_on(addr)
    port = listener.getsockname()[1]
    store = serve_store(addr, listener)  # serves until this process ends
    values = {MASTER_ADDR: addr, MASTER_PORT: port}
    mpirun = subprocess.Popen([resolve(arg, values) for arg in argv])
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _: mpirun.send_signal(signum))
    code = mpirun.wait()
    del store
    return code if code >= 0 else 128 - code  # a signal's status, as a shell reports it


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], os.environ))
