"""``python -m tenter.launch.backends.kubernetes.mpi_launcher``: an MPIJob's launcher.

The launcher pod of a Kubernetes MPIJob runs this instead of mpirun itself. Its manifest
carries the job, not its mpirun command: the validated spec, the MPIJob's name and the
processes per worker (:mod:`tenter.launch.backends.kubernetes.mpi_job`), a few KB whatever the
number of workers. From them this process makes the plan and the mpirun command with the same pure
functions as the mpi backend (:func:`tenter.contract.planner.make_plan`,
:func:`tenter.launch.backends.mpirun.mpirun_argv`). A command carrying every host's environment
grew with the square of the hosts (146 MB at 1,024 p5 workers: over Linux's ARG_MAX, and
over the API server's 1.5 MB object limit long before); now the manifest carries the job
only, and mpirun's command line each worker's name and where its ranks fetch their
environment.

Bound to the pod's own address (``TENTER_POD_IP``, from the downward API), never to all
interfaces, it serves

- the ranks' store (torch elastic's agent store: ``TORCHELASTIC_USE_AGENT_STORE=True``, so
  every rank, rank 0 included, is a client); without it rank 0's ``init_process_group``
  would serve the store on every interface of its pod;
- each rank's environment, over HTTP (``GET /rank/N``, gzipped JSON, to a request with the
  job's token, which mpirun passes the ranks by name; any other gets 403): the workers share no
  file system with the launcher, so the ranks' shims fetch what the mpi backend's read from
  the job directory's ``plan.json`` (:mod:`tenter.runtime.mpi_shim`). The standard
  library's ``http.server`` serves it: one GET per rank, no framework needed.

Then mpirun runs; SIGTERM and SIGINT (the pod's deletion, a Ctrl-C) are passed on to it, and
the launcher exits with its status once it ends, both servers with it.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tenter.contract.plan import Plan
from tenter.errors import ExitCode
from tenter.jobdir import private
from tenter.launch.backends.kubernetes.mpi_job import JOB_ENV, POD_IP_ENV, parse_job
from tenter.launch.shared.store import listener_on, serve_store
from tenter.runtime.mpi_shim import RANK_PATH, planned_env


class _RankEnvHandler(BaseHTTPRequestHandler):
    plan: Plan
    token: str

    def do_GET(self) -> None:
        if not private.authorized(self.headers.get("Authorization"), self.token):
            self.send_response(403)  # and nothing else: not even whether the rank exists
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        index = self.path.removeprefix(RANK_PATH)
        if self.path == index or not index.isdigit() or int(index) >= self.plan.world_size:
            self.send_error(404)
            return
        body = gzip.compress(json.dumps(planned_env(self.plan, int(index))).encode())
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: one line per rank would bury mpirun's output in the pod's log."""


def serve_rank_envs(plan: Plan, addr: str, token: str) -> ThreadingHTTPServer:
    """Each rank's planned environment at ``http://ADDR:PORT/rank/N``, from a thread, on a
    port the kernel picks, to requests that carry ``token`` (:func:`private.bearer`)."""
    handler = type("RankEnvHandler", (_RankEnvHandler,), {"plan": plan, "token": token})
    server = ThreadingHTTPServer((addr, 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="rank-envs", daemon=True).start()
    return server


def main(argv: list[str], environ: Mapping[str, str]) -> int:
    addr, text = environ.get(POD_IP_ENV, ""), environ.get(JOB_ENV, "")
    if argv or not addr or not text:
        print(
            f"error: usage: {POD_IP_ENV}=<the pod's address> {JOB_ENV}=<the job> "
            f"python -m {__spec__.name}; the MPIJob tenter renders sets both",
            file=sys.stderr,
        )
        return int(ExitCode.BAD_INPUT)
    try:
        job = parse_job(text)
    except ValueError as e:
        print(f"error: {e}; render the MPIJob again with tenter", file=sys.stderr)
        return int(ExitCode.BAD_INPUT)
    listener = listener_on(addr)
    port = listener.getsockname()[1]
    store = serve_store(addr, listener)  # serves until this process ends
    plan = job.plan(port)
    token = private.new_token()
    envs = serve_rank_envs(plan, addr, token)
    host = f"[{addr}]" if ":" in addr else addr
    url = f"http://{host}:{envs.server_address[1]}"
    # mpirun passes the token on to the ranks by name (-x), from its environment.
    mpirun = subprocess.Popen(
        job.mpirun(plan, addr, port, url), env={**environ, private.TOKEN_ENV: token}
    )
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _: mpirun.send_signal(signum))
    code = mpirun.wait()
    envs.shutdown()
    envs.server_close()
    del store
    return code if code >= 0 else 128 - code  # a signal's status, as a shell reports it


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], os.environ))
