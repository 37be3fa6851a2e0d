"""Memory ordering of the shared-memory flags: which fence each architecture gets, that the
flag protocol calls it where it publishes and consumes, and that the backend refuses a
machine it cannot run on correctly. This machine is x86-64, so aarch64 is simulated by
setting what ``platform.machine()`` answers; its fence is then this machine's libatomic
``atomic_thread_fence``, which really runs."""

from __future__ import annotations

import platform
from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from comm_workers import SMALL_CHUNKS, fenced_group
from commworld import leftover_segments, run_world, world_of_one

import tenter.comm
from tenter.comm.fences import LIBATOMIC, NO_FENCES, Fences, fences_for
from tenter.comm.shm import Channel, Segment, layout, segment_name

_REFUSAL = (
    r"^tenter\.comm: the 'tenter' backend does not support the 'riscv64' architecture "
    r"\(it runs on x86_64 and aarch64\); use the gloo backend instead: "
    r"`process_group_backend: gloo` in the job spec, TENTER_PG_BACKEND=gloo, or "
    r'init_process_group\("gloo"\)\.$'
)


@pytest.mark.parametrize("machine", ["x86_64", "AMD64"])
def test_fences_are_none_if_machine_orders_stores(machine: str) -> None:
    assert fences_for(machine) is NO_FENCES


@pytest.mark.parametrize("machine", ["aarch64", "arm64"])
def test_fences_call_libatomic_if_machine_is_arm(machine: str) -> None:
    fences = fences_for(machine)
    assert fences.source == f"atomic_thread_fence from {LIBATOMIC}"
    fences.release()  # the real fence, from this machine's libatomic
    fences.acquire()


def test_fences_raise_naming_the_fix_if_libatomic_is_missing() -> None:
    with pytest.raises(tenter.comm.CommPlatformError) as info:
        fences_for("aarch64", library="libatomic-absent.so.1")
    message = str(info.value)
    assert message.startswith(
        "tenter.comm: the 'tenter' backend needs a memory fence on aarch64 and could not "
        "load atomic_thread_fence from libatomic-absent.so.1 ("
    ), message
    assert message.endswith(
        "Install libatomic (Debian/Ubuntu: apt-get install libatomic1; RHEL/Amazon Linux: "
        "dnf install libatomic), or use the gloo backend instead: `process_group_backend: "
        'gloo` in the job spec, TENTER_PG_BACKEND=gloo, or init_process_group("gloo").'
    ), message


class _Recorder:
    """Fences that record, at each call, the flag the fence guards: the rank's own flag
    for a release (it must not have moved yet), a peer's for an acquire (it must have)."""

    def __init__(self, segment: Segment, events: list[tuple[str, str, int]]) -> None:
        self._flags = memoryview(segment.mm).cast("i")
        self._events = events

    def fences(self, name: str, own: int, peer: int) -> Fences:
        words = 64 // 4  # one flag per cache line

        def release() -> None:
            self._events.append(("release", name, self._flags[own * words]))

        def acquire() -> None:
            self._events.append(("acquire", name, self._flags[peer * words]))

        return Fences(release, acquire, "recorder")

    def close(self) -> None:
        self._flags.release()


@pytest.fixture
def segment() -> Iterator[Segment]:
    seg = Segment.create(segment_name("fence test"), layout(2, 4096)[1])
    try:
        yield seg
    finally:
        seg.unlink()


def test_channel_fences_each_flag_if_ranks_publish_and_consume(segment: Segment) -> None:
    events: list[tuple[str, str, int]] = []
    recorder = _Recorder(segment, events)
    a, b = (
        Channel(segment, 2, me, 4096, 5.0, str, "'test'", recorder.fences(name, me, 1 - me))
        for me, name in ((0, "a"), (1, "b"))
    )
    try:
        b.arrive()  # b publishes
        a.sync()  # a publishes, then consumes b's flag
        assert b.poll(0.0)  # b consumes a's flag
        b.wait()  # and again, waiting
    finally:
        recorder.close()
        for ch in (a, b):
            ch.close()
    assert events == [
        ("release", "b", 0),  # before b's flag moved to 1
        ("release", "a", 0),
        ("acquire", "a", 1),  # after b's flag was seen at 1
        ("acquire", "b", 1),
        ("acquire", "b", 1),
    ]


def test_backend_refuses_machine_if_architecture_is_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(platform, "machine", lambda: "riscv64")
    with pytest.raises(tenter.comm.CommPlatformError, match=_REFUSAL):
        dist.init_process_group("tenter", store=dist.HashStore(), rank=0, world_size=1)
    assert not dist.is_initialized()


def test_backend_runs_if_machine_is_aarch64(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(platform, "machine", lambda: "aarch64")
    with world_of_one():
        t = torch.arange(4.0)
        dist.all_reduce(t)
        assert t.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_collectives_run_fenced_if_ranks_on_aarch64_share_memory() -> None:
    world = run_world(fenced_group, 2, env=SMALL_CHUNKS)
    values = world.values()
    for value in values:
        assert value["fences"] == f"atomic_thread_fence from {LIBATOMIC}", value
        assert value["refused"].startswith(
            "CommPlatformError: tenter.comm: the 'tenter' backend does not support the "
            "'riscv64' architecture"
        ), value
        assert value["checked"] > 0, value
    assert values[0]["digests"] == values[1]["digests"]
    assert leftover_segments(world.job_id) == []
