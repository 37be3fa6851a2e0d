"""Restarts within a rendezvous round: hosts (threads here) agree through the round's store
(a real TCPStore) on restarting together, without the hosts the launcher declared lost, or
all fall back to torch's rendezvous."""

from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import pytest
import torch.distributed as dist

from tenter.launch.agent import in_round, rendezvous
from tenter.launch.shared.store import serve_store


class Waiting:
    """The part of torch's ``RendezvousHandler`` the restart asks: hosts waiting to join."""

    def __init__(self, waiting: int = 0) -> None:
        self.waiting = waiting

    def num_nodes_waiting(self) -> int:
        return self.waiting


@pytest.fixture
def server() -> dist.TCPStore:
    store: dist.TCPStore = serve_store("127.0.0.1", socket.create_server(("127.0.0.1", 0)))
    return store


def _round(server: dist.TCPStore, group_rank: int, hosts: int) -> rendezvous.Round:
    """Host ``algo-<group_rank + 1>``'s view of a round, its name published as ``join`` does."""
    store = dist.TCPStore("127.0.0.1", server.port, is_master=False)
    store.set(rendezvous.HOST_NAME_KEY.format(group_rank=group_rank), _name(group_rank))
    return rendezvous.Round(store, group_rank, hosts, "127.0.0.1", 1234, None)


def _name(group_rank: int) -> str:
    return f"algo-{group_rank + 1}"


def _restart(
    round_: rendezvous.Round,
    waiting: int = 0,
    lost: frozenset[str] = frozenset(),
    min_hosts: int = 0,
) -> rendezvous.Round | None:
    name = round_.names[round_.group_rank] if round_.names else _name(round_.group_rank)
    return in_round.restart(
        round_,
        Waiting(waiting),  # type: ignore[arg-type]
        name,
        "127.0.0.1",
        lambda: set(lost),
        min_hosts or round_.hosts,
    )


def test_restart_gives_every_host_rank_0s_new_workers_store_if_all_hosts_join(
    server: dist.TCPStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(in_round, "WAIT_S", 60.0)  # the hosts join one after another
    rounds = [_round(server, rank, 3) for rank in range(3)]
    assert not in_round.asked(rounds[1])
    with ThreadPoolExecutor(3) as pool:
        first = pool.submit(_restart, rounds[2])
        # A host whose workers still run sees that another restarts.
        deadline = time.monotonic() + 30
        while not in_round.asked(rounds[1]) and time.monotonic() < deadline:
            time.sleep(0.01)
        others = [pool.submit(_restart, r) for r in rounds[:2]]
        restarted = [f.result(timeout=30) for f in [*others, first]]
    assert all(restarted)
    seen = {(r.restarts, r.group_rank, r.hosts, r.master_addr, r.master_port) for r in restarted}
    port = restarted[0].master_port  # type: ignore[union-attr]
    assert seen == {(1, rank, 3, "127.0.0.1", port) for rank in range(3)}
    assert port != 1234
    # The next restart is a new one: restart 1's keys do not ask for it.
    assert not any(in_round.asked(r) for r in restarted)  # type: ignore[arg-type]


def test_restart_falls_back_on_every_host_if_one_never_joins(
    server: dist.TCPStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(in_round, "WAIT_S", 0.5)
    rounds = [_round(server, rank, 3) for rank in range(3)]
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(_restart, rounds[:2]))
    assert results == [None, None]
    # A host that joins after the others gave up falls back at once, as they did.
    assert _restart(rounds[2]) is None


def test_restart_falls_back_at_once_if_a_host_waits_in_torchs_rendezvous(
    server: dist.TCPStore,
) -> None:
    rounds = [_round(server, rank, 2) for rank in range(2)]
    assert _restart(rounds[0], waiting=1) is None
    assert _restart(rounds[1]) is None


def test_restart_goes_on_at_once_without_a_host_declared_lost(
    server: dist.TCPStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(in_round, "WAIT_S", 60.0)  # a wait would fail the time bound below
    rounds = [_round(server, rank, 3) for rank in range(3)]
    lost = frozenset({"algo-1"})  # group rank 0, which served the workers' store
    started = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        restarted = list(pool.map(lambda r: _restart(r, lost=lost, min_hosts=2), rounds[1:]))
    assert time.monotonic() - started < 10
    assert [r and (r.group_rank, r.hosts, r.names) for r in restarted] == [
        (0, 2, ("algo-2", "algo-3")),
        (1, 2, ("algo-2", "algo-3")),
    ]
    # algo-2, the new group rank 0, serves the workers' store that both were given.
    ports = {r.master_port for r in restarted if r}
    assert len(ports) == 1 and ports != {1234}
    assert restarted[0] and restarted[0].workers_store is not None
    # The next restart of the smaller round, with algo-3 lost too, goes on with algo-2 alone.
    again = _restart(restarted[0], lost=lost | {"algo-3"}, min_hosts=1)
    assert again and (again.group_rank, again.hosts, again.names) == (0, 1, ("algo-2",))


def test_restart_falls_back_at_once_if_fewer_than_min_hosts_would_go_on(
    server: dist.TCPStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(in_round, "WAIT_S", 60.0)
    rounds = [_round(server, rank, 2) for rank in range(2)]
    started = time.monotonic()
    assert _restart(rounds[0], lost=frozenset({"algo-2"}), min_hosts=2) is None
    assert time.monotonic() - started < 10


class CountedStore:
    """A host's client of the round's store (a real one), counting the requests it sends."""

    def __init__(self, store: dist.TCPStore) -> None:
        self.store = store
        self.requests = 0
        self.most_keys = 0
        """The most keys one request named."""
        self.gets = 0

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)

        def counted(*args: Any) -> Any:
            self.requests += 1
            self.gets += name == "get"
            keys = len(args[0]) if isinstance(args[0], list) else 1
            self.most_keys = max(self.most_keys, keys)
            return method(*args)

        return counted


def test_a_restart_costs_each_host_a_number_of_requests_that_does_not_grow_with_the_hosts(
    server: dist.TCPStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(in_round, "WAIT_S", 60.0)
    hosts = 16
    rounds = [_round(server, rank, hosts) for rank in range(hosts)]
    stores = [CountedStore(r.store) for r in rounds]  # type: ignore[arg-type]
    counted = [replace(r, store=s) for r, s in zip(rounds, stores, strict=True)]  # type: ignore[arg-type]
    with ThreadPoolExecutor(hosts) as pool:
        restarted = list(pool.map(_restart, counted))
    assert all(restarted)
    # The first host to join watches and the last decides (they read every host's name);
    # every other host sends its name, joins, waits for the outcome and reads it; the new
    # round's group rank 0 also publishes its workers' store (one request more). Which host
    # is which depends on the threads' order: the publisher is known, the other two are the
    # largest counts left.
    requests = [s.requests for s in stores]
    publisher = [r.group_rank for r in restarted if r is not None].index(0)
    plain = sorted(n - (i == publisher) for i, n in enumerate(requests))
    assert max(plain[: hosts - 2]) <= 6, requests
    # The deciding hosts read every host's name in a couple of requests, not a get per host
    # (the first host's looks while it waits for the others are polls: their count is time's).
    assert max(s.gets for s in stores) <= 3, [s.gets for s in stores]


def test_joining_a_round_costs_each_host_but_rank_0_a_few_one_key_requests(
    server: dist.TCPStore,
) -> None:
    hosts = 16
    stores = [
        CountedStore(dist.TCPStore("127.0.0.1", server.port, is_master=False)) for _ in range(hosts)
    ]

    class Handler:  # the part of torch's handler that join asks: the round it formed
        def __init__(self, rank: int) -> None:
            self.info = SimpleNamespace(store=stores[rank], rank=rank, world_size=hosts)

        def next_rendezvous(self) -> SimpleNamespace:
            return self.info

    def join(rank: int) -> rendezvous.Round:
        return rendezvous.join(Handler(rank), _name(rank), "127.0.0.1", restart_count=rank % 5)  # type: ignore[arg-type]

    with ThreadPoolExecutor(hosts) as pool:
        rounds = list(pool.map(join, range(hosts)))
    # Every host learns the most restarts any host knew; rank 0 read the hosts' counts in two
    # requests (each host used to read every host's: O(hosts^2) in all).
    assert {r.restart_count for r in rounds} == {4}
    assert stores[0].requests <= 8, stores[0].requests
    assert max(s.requests for s in stores[1:]) <= 4, [s.requests for s in stores]
    assert max(s.most_keys for s in stores[1:]) == 1
    rounds[0].close()


def test_the_exit_barrier_looks_at_one_key_whatever_the_hosts(server: dist.TCPStore) -> None:
    hosts = 8
    rounds = [_round(server, rank, hosts) for rank in range(hosts)]
    stores = [CountedStore(r.store) for r in rounds]  # type: ignore[arg-type]
    counted = [replace(r, store=s) for r, s in zip(rounds, stores, strict=True)]  # type: ignore[arg-type]
    with ThreadPoolExecutor(hosts - 1) as pool:
        early = [pool.submit(rendezvous.exit_barrier, r, 30.0, lambda: False) for r in counted[1:]]
        finished, deadline = rendezvous.FINISHED_KEY.format(restarts=0), time.monotonic() + 10
        while server.add(finished, 0) < hosts - 1:
            assert time.monotonic() < deadline, "the early hosts never entered the barrier"
            time.sleep(0.01)  # polls for the condition; nothing to be notified by
        assert not any(f.done() for f in early)  # they wait for the last host
        assert rendezvous.exit_barrier(counted[0], 30.0, lambda: False) is False
        assert [f.result(timeout=10) for f in early] == [False] * (hosts - 1)
    assert max(s.most_keys for s in stores) == 1  # every host's key used to be in each look


def test_a_larger_round_looks_at_the_store_less_often_keeping_its_load_bounded() -> None:
    assert rendezvous.poll_interval(64, 0.1) == 0.1
    assert rendezvous.poll_interval(16_000, 0.1) == pytest.approx(1.6)
    assert 16_000 / rendezvous.poll_interval(16_000, 0.1) <= rendezvous.STORE_POLLS_PER_S
