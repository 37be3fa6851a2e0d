"""Which drain of the cluster's nodes preempts a job, and what the console says of it (the
drain itself, on a real cluster: test_ray.py)."""

from __future__ import annotations

import time

from tenter.launch.backends.ray.drain import Drain, first_drain

HOSTS = {"algo-1": "aa11", "algo-2": "bb22"}


def test_only_a_drain_of_one_of_the_jobs_nodes_counts() -> None:
    assert first_drain(HOSTS, {"cc33": 0}) is None
    assert first_drain(HOSTS, {"cc33": 0, "bb22": 5000}) == Drain("algo-2", "bb22", 5000)


def test_the_console_says_the_node_the_host_and_the_deadline() -> None:
    now = float(int(time.time()))  # whole seconds: the deadline in ms is exact
    with_deadline = Drain("algo-2", "bb22", int((now + 30) * 1000)).describe(now)
    clock = time.strftime("%H:%M:%S", time.localtime(now + 30))
    assert with_deadline == (
        f"ray: node bb22 (host algo-2) is draining: deadline in 30 s ({clock}); preempting the job"
    )
    assert Drain("algo-2", "bb22", 0).describe(now) == (
        "ray: node bb22 (host algo-2) is draining: no deadline given; preempting the job"
    )
