"""``python -m tenter.launch.slurm.node PLAN``: one per node, started by the job's srun step.

It resolves the node's part of the plan from ``SLURMD_NODENAME`` and ``SLURM_JOB_NODELIST`` (the
plan names the nodes' addresses ``${slurm_node_<i>}`` until Slurm allocates them, and the
interface of a job of simulated-host instance type ``${slurm_nic}``) and runs tenter's per-host
agent (:mod:`tenter.launch.agent`: torch elastic's rendezvous, the same worker contract, error
files and logs as the local backend). The agents rendezvous (c10d) on the first node, whose
entry serves the store on a port the kernel picks and publishes it in ``rdzv-port`` in the job
directory, which Slurm jobs have on a shared file system anyway (their output paths).

A ``fault_tolerance`` job: the first node also runs torchft's lighthouse (published in
``lighthouse-port``), and each node's agent joins its replica group's own rendezvous. A group
restarts on its own (``elastic.max_restarts``); one whose restarts are spent ends the srun
step, and with it the job (``--kill-on-bad-exit``).
"""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from tenter.contract.placeholders import LIGHTHOUSE_PORT, RDZV_PORT, SLURM_NIC, resolve, slurm_node
from tenter.contract.plan import Plan
from tenter.errors import TenterError
from tenter.jobdir import agent_result, layout
from tenter.launch import agent
from tenter.launch.lighthouse import Lighthouse
from tenter.launch.store import serve_store

KEEP_ALIVE_S = 0.1
"""How often the first node checks that torchft's lighthouse runs."""


@dataclasses.dataclass(frozen=True)
class SlurmNode:
    name: str
    addr: str
    """Its NodeAddr: where Slurm reaches it (its NodeName where none is configured)."""


def allocation(nodelist: str) -> list[SlurmNode]:
    """The job's nodes (``SLURM_JOB_NODELIST``), as Slurm knows them, in rendezvous order."""
    out = subprocess.run(
        ["scontrol", "-o", "show", "node", nodelist], capture_output=True, text=True, check=True
    )
    return in_rendezvous_order(out.stdout)


def in_rendezvous_order(scontrol_nodes: str) -> list[SlurmNode]:
    """The nodes of ``scontrol -o show node`` in the order of torch's rendezvous, which ranks
    hosts by sorting their addresses as strings: host ``i`` of the plan runs on node ``i`` of
    this list, so that its group rank (and so every rank number) is the plan's, whatever the
    nodes' names or Slurm's order.

    Addresses, not names: a node's name need not resolve where its peers look it up (Slurm
    itself reaches nodes by NodeAddr)."""
    nodes = []
    for line in scontrol_nodes.splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        nodes.append(SlurmNode(fields["NodeName"], fields.get("NodeAddr") or fields["NodeName"]))
    return sorted(nodes, key=lambda n: n.addr)


def interface_of(addr: str) -> str:
    """The network interface that carries ``addr`` on this node (the NIC the node's peers
    reach it through); loopback for a node reached at a loopback address."""
    ip = socket.gethostbyname(addr)
    for name, addrs in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == ip for a in addrs):
            return name
    raise OSError(f"no interface of this node has its NodeAddr {addr} ({ip})")


def _wait_for_port(path: Path, timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"the first node did not publish its rendezvous port in {path}")
        time.sleep(0.1)
    return int(path.read_text().rsplit(":", 1)[1])


def resolve_plan(text: str, nodes: list[SlurmNode], node_id: int) -> Plan:
    """The plan with Slurm's nodes in place of the placeholders; a c10d rendezvous on the
    first node (an etcd one stays where the spec puts it)."""
    values = {slurm_node(index): node.addr for index, node in enumerate(nodes)}
    values[SLURM_NIC] = interface_of(nodes[node_id].addr)
    plan = Plan.from_json(text).resolved(values)
    if plan.rdzv_backend != "c10d":
        return plan
    return dataclasses.replace(plan, rdzv_endpoint=f"{nodes[0].addr}:{RDZV_PORT}")


def node_main(plan_path: str) -> int:
    nodes = allocation(os.environ["SLURM_JOB_NODELIST"])
    node_id = [n.name for n in nodes].index(os.environ["SLURMD_NODENAME"])
    plan = resolve_plan(Path(plan_path).read_text(), nodes, node_id)
    host = plan.hosts[node_id]
    with open(layout.logs_dir(plan.job_dir) / layout.agent_log(host.name), "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    resolved = Path(host.dir) / layout.PLAN_FILE
    resolved.write_text(plan.to_json())
    os.environ.update(plan.host_env(host))
    if plan.rdzv_backend != "c10d":
        return agent.main([str(resolved), str(node_id), "0"])  # the endpoint has its port
    lighthouse = _lighthouse(plan, nodes, node_id) if plan.replica_groups else None
    port_file = Path(plan.job_dir) / layout.RDZV_PORT_FILE
    store = None
    if node_id == 0:
        # The kernel picks the port and the store keeps the socket: no window for a clash.
        # Bound to the job's address on the first node, never to all its interfaces.
        listener = socket.create_server((nodes[0].addr, 0), backlog=1024)
        port = listener.getsockname()[1]
        store = serve_store(nodes[0].addr, listener)
        _publish(port_file, f"{nodes[0].addr}:{port}\n")
    else:
        port = _wait_for_port(port_file, plan.join_timeout)
    # The first node's agent runs beside the store's (and lighthouse's) threads: its
    # template is a fresh process, not a fork.
    alone = store is None and lighthouse is None
    code = agent.main([str(resolved), str(node_id), str(port)], fork_template=alone)
    if store is not None:
        # Serve the store (and the lighthouse) until every agent is done with it.
        results = [agent_result.result_path(h.dir) for h in plan.hosts]
        deadline = time.monotonic() + 60
        while not all(r.exists() for r in results) and time.monotonic() < deadline:
            time.sleep(0.1)
    if lighthouse is not None:
        lighthouse.stop()
    return code


def _publish(path: Path, text: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _lighthouse(plan: Plan, nodes: list[SlurmNode], node_id: int) -> Lighthouse | None:
    """``fault_tolerance``: the first node runs torchft's lighthouse, bound to its address, and
    restarts it if it dies; every node tells its workers where it listens."""
    port_file = Path(plan.job_dir) / layout.LIGHTHOUSE_PORT_FILE
    lighthouse = None
    if node_id == 0:
        lighthouse = Lighthouse(
            plan.job_dir,
            socket.gethostbyname(nodes[0].addr),
            plan.min_replicas,
            plan.lighthouse_heartbeat_ms,
            env={"TENTER_JOB_ID": plan.job_id},
        )
        lighthouse.start()
        _publish(port_file, f"{nodes[0].addr}:{lighthouse.port}\n")
        threading.Thread(target=_keep_alive, args=(lighthouse,), daemon=True).start()
    port = _wait_for_port(port_file, plan.join_timeout)
    address = resolve(os.environ["TORCHFT_LIGHTHOUSE"], {LIGHTHOUSE_PORT: port})
    os.environ["TORCHFT_LIGHTHOUSE"] = address
    return lighthouse


def _keep_alive(lighthouse: Lighthouse) -> None:
    """Restart the lighthouse when it dies, for as long as this node's entry runs."""
    while True:
        time.sleep(KEEP_ALIVE_S)
        try:
            lighthouse.keep_alive()
        except TenterError as e:  # its port was taken meanwhile: say so in the node's log
            print(f"tenter: {e}", flush=True)
            return


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tenter.launch.slurm.node PLAN_JSON")
    code = node_main(sys.argv[1])
    sys.stdout.flush()
    os._exit(code)
