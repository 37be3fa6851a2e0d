"""The host agent's state machine, one host in process, with a rendezvous handler that
forms a round of this host alone (a dummy of torch's public ``RendezvousHandler``)."""

from __future__ import annotations

import itertools
import json
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch.distributed as dist
from torch.distributed.elastic.rendezvous import RendezvousHandler, RendezvousInfo
from torch.distributed.elastic.rendezvous.api import RendezvousStoreInfo

from tenter.contract.plan import Plan
from tenter.contract.planner import make_plan
from tenter.jobdir.agent_result import AgentResult
from tenter.jobdir.layout import EVENTS_FILE
from tenter.launch.agent import peer_looks, rendezvous
from tenter.launch.agent.host import AgentState, HostAgent
from tenter.launch.agent.spec import agent_spec
from tenter.spec import load

RECORD = """
import json, os, sys
out = os.path.join(os.environ["OUT"], os.path.basename(os.environ["TORCHELASTIC_ERROR_FILE"]))
with open(out + ".tmp", "w") as f:
    json.dump(dict(os.environ), f)
os.replace(out + ".tmp", out)  # whole or not at all: the agent may stop this worker
"""


class OneHostRendezvous(RendezvousHandler):
    """Every round is this host alone; ``waiting`` hosts are reported once."""

    def __init__(self) -> None:
        self.rounds = 0
        self.waiting = 0
        self._store = dist.HashStore()

    def get_backend(self) -> str:
        return "one-host"

    def next_rendezvous(self) -> RendezvousInfo:
        self.rounds += 1
        store = dist.PrefixStore(f"round-{self.rounds}", self._store)
        return RendezvousInfo(store, 0, 1, RendezvousStoreInfo("127.0.0.1", 0))

    def is_closed(self) -> bool:
        return False

    def set_closed(self) -> None:
        pass

    def num_nodes_waiting(self) -> int:
        waiting, self.waiting = self.waiting, 0
        return waiting

    def get_run_id(self) -> str:
        return "one-host"

    def shutdown(self) -> bool:
        return True


@pytest.fixture
def out(tmp_path: Path) -> Path:
    (tmp_path / "out").mkdir()
    return tmp_path / "out"


def _plan(tmp_path: Path, script: str, max_restarts: int = 0) -> Plan:
    spec, _ = load(
        {
            "command": [sys.executable, "-c", RECORD + script],
            "instance_count": 1,
            "processes_per_host": 2,
            "elastic": {"max_restarts": max_restarts},
        },
        tmp_path,
    )
    plan = make_plan(spec, "agent-1", tmp_path, sys.executable)
    (Path(plan.job_dir) / "logs").mkdir(parents=True)
    return plan


def _run(
    plan: Plan,
    out: Path,
    handler: RendezvousHandler,
    planned_round: Callable[[], rendezvous.Round] | None = None,
) -> tuple[HostAgent, AgentResult]:
    host = plan.hosts[0]
    env = {"OUT": str(out), **plan.host_env(host)}
    spec = agent_spec(plan, host, plan.rdzv_endpoint, env)
    agent = HostAgent(spec, handler, pool=None, planned_round=planned_round)
    return agent, agent.run()


def _records(out: Path) -> dict[str, dict[str, str]]:
    return {p.name: json.loads(p.read_text()) for p in sorted(out.glob("*.json"))}


def test_run_succeeds_with_torchruns_variables_if_every_worker_exits_0(
    tmp_path: Path, out: Path
) -> None:
    plan = _plan(tmp_path, "")
    _, result = _run(plan, out, OneHostRendezvous())
    assert result.state == "SUCCEEDED"
    records = _records(out)
    assert sorted(records) == ["rank-0.error.json", "rank-1.error.json"]
    env = records["rank-1.error.json"]
    master_addr, master_port = env["MASTER_ADDR"], env["MASTER_PORT"]
    assert master_addr == "127.100.0.1" and int(master_port) > 0
    host = plan.hosts[0]
    planned = {**plan.process_env(host, host.ranks[1]), "MASTER_PORT": master_port}
    assert {k: env[k] for k in planned} == planned
    assert env["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "1"


def test_run_restarts_until_its_restarts_are_spent_if_workers_keep_failing(
    tmp_path: Path, out: Path
) -> None:
    plan = _plan(tmp_path, "sys.exit(3)", max_restarts=2)
    handler = OneHostRendezvous()
    agent, result = _run(plan, out, handler)
    # A job of fixed membership restarts within its rendezvous round.
    assert (result.state, agent.state, handler.rounds) == ("FAILED", AgentState.FAILED, 1)
    assert agent.remaining_restarts == 0
    events = (Path(plan.job_dir) / EVENTS_FILE).read_text().splitlines()
    rounds = [json.loads(e) for e in events if '"rendezvous"' in e]
    assert [(e["attempt"], e["restarts_in_round"]) for e in rounds] == [(0, 0), (1, 1), (2, 2)]
    # The workers that had failed when the agent looked (the other is stopped).
    assert result.failures and {(f.exit_code, f.pid > 0) for f in result.failures} == {(3, True)}
    # At least the failed worker of each round wrote its record (the other may have been
    # stopped before it did).
    counts = {
        (name.split("attempt-")[1][0] if "attempt-" in name else "0"): env[
            "TORCHELASTIC_RESTART_COUNT"
        ]
        for name, env in _records(out).items()
    }
    assert counts == {"0": "0", "1": "1", "2": "2"}


def test_run_restarts_without_using_a_restart_if_a_host_waits_to_join(
    tmp_path: Path, out: Path
) -> None:
    # The first round's workers run until the restart stops them; the second's finish.
    plan = _plan(tmp_path, "import time\nif 'attempt-1' not in out: time.sleep(120)")
    handler = OneHostRendezvous()
    handler.waiting = 1
    agent, result = _run(plan, out, handler)
    assert (result.state, agent.state, handler.rounds) == ("SUCCEEDED", AgentState.SUCCEEDED, 2)
    second = _records(out)["rank-0.algo-1.attempt-1.error.json"]
    assert second["TORCHELASTIC_RESTART_COUNT"] == "0"


class JoinsOnThirdAsk(OneHostRendezvous):
    """A host waits to join from the third time the agent asks; each ask's time is kept."""

    def __init__(self) -> None:
        super().__init__()
        self.asked_at: list[float] = []

    def num_nodes_waiting(self) -> int:
        self.asked_at.append(time.monotonic())
        return 1 if len(self.asked_at) == 3 else 0


def test_a_host_waiting_to_join_is_asked_about_once_per_join_check_and_restarts_the_workers(
    tmp_path: Path, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # torch is asked every JOIN_CHECK_S, not every 0.1 s pass (an idle agent's largest cost),
    # and a host that comes to wait is still taken in by a new round.
    monkeypatch.setattr(peer_looks, "JOIN_CHECK_S", 0.4)
    plan = _plan(tmp_path, "import time\nif 'attempt-1' not in out: time.sleep(120)")
    handler = JoinsOnThirdAsk()
    _, result = _run(plan, out, handler)
    assert (result.state, handler.rounds) == ("SUCCEEDED", 2)
    gaps = [b - a for a, b in itertools.pairwise(handler.asked_at[:3])]
    assert min(gaps) >= 0.4, gaps
    assert _records(out)["rank-0.algo-1.attempt-1.error.json"]["TORCHELASTIC_RESTART_COUNT"] == "0"


def test_the_first_round_is_the_planned_one_and_a_new_round_torchs(
    tmp_path: Path, out: Path
) -> None:
    plan = _plan(tmp_path, "import time\nif 'attempt-1' not in out: time.sleep(120)")
    handler = OneHostRendezvous()
    handler.waiting = 1  # a new round, once the planned one's workers run

    def planned_round() -> rendezvous.Round:
        store = dist.PrefixStore("planned", dist.HashStore())
        return rendezvous.Round(store, 0, 1, "127.0.0.1", 29400, None, planned=True)

    _, result = _run(plan, out, handler, planned_round)
    assert (result.state, handler.rounds) == ("SUCCEEDED", 1)
    events = (Path(plan.job_dir) / EVENTS_FILE).read_text().splitlines()
    rounds = [json.loads(e) for e in events if '"rendezvous"' in e]
    assert [(e["attempt"], e["planned"]) for e in rounds] == [(0, True), (1, False)]
    assert _records(out)["rank-1.error.json"]["MASTER_PORT"] == "29400"


def test_run_succeeds_and_notes_workers_that_crashed_at_exit_after_finishing(
    tmp_path: Path, out: Path
) -> None:
    finished = "from tenter.contract.torchrun import finished_marker\n"
    finished += "open(finished_marker(os.environ['TORCHELASTIC_ERROR_FILE']), 'w').close()\n"
    finished += "os.kill(os.getpid(), 11)"
    agent, result = _run(_plan(tmp_path, finished), out, OneHostRendezvous())
    assert result.state == "SUCCEEDED"
    assert sorted((f.rank, f.exit_code) for f in agent.finished_then_crashed()) == [
        (0, -11),
        (1, -11),
    ]


@pytest.fixture
def stop_signals_ignored() -> Iterator[None]:
    """The agent's SIGINT and SIGQUIT ignored, as a shell's background job has them."""
    previous = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGQUIT)}
    yield
    for sig, handler in previous.items():
        signal.signal(sig, handler)


@pytest.mark.usefixtures("stop_signals_ignored")
def test_workers_start_with_default_stop_signals_if_their_agent_ignores_them(
    tmp_path: Path, out: Path
) -> None:
    ignored = "mask = [l for l in open('/proc/self/status') if l.startswith('SigIgn:')][0]\n"
    ignored += "sys.exit(int(mask.split()[1], 16) & ((1 << 1) | (1 << 2)))"  # SIGINT, SIGQUIT
    _, result = _run(_plan(tmp_path, ignored), out, OneHostRendezvous())
    assert result.state == "SUCCEEDED", result
