"""``python -m tenter.launch.backends.slurm.node PLAN``: one per node, started by the job's srun
step.

It resolves the node's part of the plan from ``SLURMD_NODENAME`` and ``SLURM_JOB_NODELIST`` (the
plan names the nodes' addresses ``${slurm_node_<i>}`` until Slurm allocates them, and the
interface of a job of simulated-host instance type ``${slurm_nic}``) and runs tenter's per-host
agent (:mod:`tenter.launch.agent`: torch elastic's rendezvous, the same worker contract, error
files and logs as the local backend). The agents rendezvous (c10d) on the first node, whose
entry serves the store on a port the kernel picks and publishes it in ``rdzv-port`` in the job
directory, which Slurm jobs have on a shared file system anyway (their output paths): that
is the agent's own doing (:mod:`tenter.launch.agent.job_store`).

A job with a ``hang_timeout``: the first node's entry runs the job's hang watch (the local
launcher's :class:`~tenter.launch.launcher.watchers.hang.HangWatcher`, in a thread beside its
agent, so that it works however the job was submitted: ``tenter run --detach`` returns after
``sbatch``). It reads every host's ranks summary every 0.5 s (one ``stat`` a host); the
ranks' stacks and states it asks through their agents
(:class:`~tenter.launch.diagnosis.rank_signals.RelayedSignals`). On a hang it writes the
report; ``on_hang: stop`` then asks every agent to stop (``control/hang-stop``), which ends
the srun step and the job (its result: HANG); ``restart`` has the agents SIGKILL the workers,
and they restart them.

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

from tenter.contract.placeholders import RDZV_PORT, SLURM_NIC, slurm_node
from tenter.contract.plan import Plan
from tenter.errors import TenterError
from tenter.jobdir import layout
from tenter.jobdir.control import request_hang_stop
from tenter.jobdir.events import EventFollower, EventKind, is_kind
from tenter.launch import agent
from tenter.launch.diagnosis.rank_signals import RelayedSignals
from tenter.launch.launcher.lighthouse import Lighthouse
from tenter.launch.launcher.watchers.hang import CHECK_S, HangWatcher

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


def resolve_plan(text: str, nodes: list[SlurmNode], node_id: int) -> Plan:
    """The plan with Slurm's nodes in place of the placeholders; a c10d rendezvous on the
    first node (an etcd one stays where the spec puts it)."""
    values = {slurm_node(index): node.addr for index, node in enumerate(nodes)}
    values[SLURM_NIC] = interface_of(nodes[node_id].addr)
    plan = Plan.from_json(text).resolved(values)
    if not plan.serves_store:
        return plan
    return dataclasses.replace(
        plan, rdzv_endpoint=f"{nodes[0].addr}:{RDZV_PORT}", store_on_first_host=True
    )


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
    # The first node's agent serves a c10d rendezvous' store (tenter.launch.agent.job_store).
    lighthouse = _lighthouse(plan, nodes, node_id) if plan.replica_groups else None
    if node_id == 0 and plan.hang_timeout:
        threading.Thread(target=_watch_hangs, args=(plan,), daemon=True).start()
    # The agent's template is a fresh process, not a fork of this one: a fork's initial
    # environment (/proc/PID/environ, by which tenter finds a job's processes) would be
    # Slurm's, which names no job; and the lighthouse runs a keep-alive thread here.
    code = agent.main([str(resolved), str(node_id), "0"], fork_template=False)
    if lighthouse is not None:
        lighthouse.stop()
    return code


def _lighthouse(plan: Plan, nodes: list[SlurmNode], node_id: int) -> Lighthouse | None:
    """``fault_tolerance``: the first node runs torchft's lighthouse, bound to its address, and
    restarts it if it dies; every node tells its workers where it listens."""
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
        threading.Thread(target=_keep_alive, args=(lighthouse,), daemon=True).start()
    return lighthouse


class _Restarts:
    """When an agent last began a group restart (0 before any), from the job's events: the
    restarted ranks' start-up is timed from then (:func:`tenter.launch.diagnosis.hang.
    summary_verdict`)."""

    def __init__(self, job_dir: str) -> None:
        self._events = EventFollower(job_dir)
        self._at = 0.0

    def __call__(self) -> float:
        for event in self._events.read_new():
            if is_kind(event, EventKind.RESTART):
                self._at = max(self._at, float(str(event["time"])))
        return self._at


def _watch_hangs(plan: Plan) -> None:
    """The job's hang watch, until a hang stops the job (or this process ends)."""
    dirs = {host.name: host.dir for host in plan.hosts}
    watcher = HangWatcher(
        plan,
        [],  # the report is the job directory's; _finish reads it into the summary
        _Restarts(plan.job_dir),
        lambda: list(dirs.values()),
        RelayedSignals(plan.job_dir, dirs),
    )
    while watcher.tick(time.monotonic()) is None:
        time.sleep(CHECK_S)
    request_hang_stop(plan.job_dir)


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
        sys.exit("usage: python -m tenter.launch.backends.slurm.node PLAN_JSON")
    code = node_main(sys.argv[1])
    sys.stdout.flush()
    os._exit(code)
