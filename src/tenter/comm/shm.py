"""POSIX shared-memory segments and the flag protocol the ranks of one host share.

One segment per process group and host. Its layout, for ``L`` local ranks and a chunk of
``C`` bytes::

    control  arrive[L]    int32, one cache line each: barrier counters (futex words)
             sleeping[L]  int32, one cache line each: "I am asleep in futex_wait"
             pid[L]       int64, one cache line each: for dead-peer detection
             desc[2][L]   int64 x (8 + L): what each rank is calling (mismatch check)
    data     slot[2][L][C]  each rank's staging buffer, two of them (double buffering)
             result[2][C]   reduced chunks, rank r owning the r-th portion

Every collective is a sequence of *rounds*; a round writes to the buffers of parity
``round % 2`` and then passes one or more barriers. A rank enters round ``s + 2`` only
after every peer arrived at the first barrier of round ``s + 1``, and a peer arrives
there only after it finished reading round ``s``'s buffers, so rewriting them is safe
without a second "done reading" barrier.

Lifetime: the segment is unlinked as soon as every local rank has mapped it, so it
disappears from ``/dev/shm`` however the processes end (normal exit, exception, Ctrl-C,
SIGKILL); only a crash inside that millisecond window of ``init_process_group`` can leave
a file, named ``tenter-<job>-<pid>-<random>`` so a launcher can sweep its own job's.

Synchronisation uses plain loads and stores on the flags, with a release fence before a
rank stores its flag and an acquire fence once it has seen its peers' (no-ops on x86's
total store order, a real barrier on aarch64: :mod:`tenter.comm.fences`), and
``futex(2)`` through ctypes to sleep without holding the GIL once a short spin fails, so a
rank waiting for a slow peer costs no CPU and blocks no other Python thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import functools
import mmap
import os
import platform
import secrets
import struct
import time
from collections.abc import Callable, Sequence
from typing import ClassVar

import torch

from tenter.comm.errors import CommError, CommPeerDiedError, CommTimeoutError
from tenter.comm.fences import Fences

SHM_DIR = "/dev/shm"
SEGMENT_PREFIX = "tenter-"

_LINE = 64  # bytes; one flag per cache line so ranks never write the same line
_MASK = 0x7FFFFFFF  # barrier counters wrap in 31 bits; compared modulo 2**31
_HALF = 1 << 30
DESC_FIXED = 8
_SPIN_S = 50e-6  # spin this long before sleeping: a running peer arrives within microseconds
_SLEEP_SLICE_S = 0.01  # futex waits are bounded, so a lost wake-up costs 10 ms, never a hang
_LIVENESS_PERIOD_S = 1.0


class _Futex:
    """``futex(2)`` wait/wake on a shared (not process-private) 32-bit word."""

    _SYSCALL_NUMBERS: ClassVar[dict[str, int]] = {"x86_64": 202, "aarch64": 98}
    _WAIT, _WAKE = 0, 1

    class _Timespec(ctypes.Structure):
        _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

    def __init__(self) -> None:
        self.number = self._SYSCALL_NUMBERS.get(platform.machine())
        self.available = self.number is not None and os.uname().sysname == "Linux"
        if self.available:
            libc = ctypes.CDLL(None, use_errno=True)
            self._syscall = libc.syscall
            self._syscall.restype = ctypes.c_long
            self._syscall.argtypes = [
                ctypes.c_long,
                ctypes.c_void_p,
                ctypes.c_int,
                ctypes.c_int,
                ctypes.c_void_p,
                ctypes.c_void_p,
                ctypes.c_int,
            ]

    def wait(self, addr: int, expected: int, timeout_s: float) -> None:
        """Sleep while the word at ``addr`` equals ``expected`` (ctypes drops the GIL)."""
        ts = self._Timespec(int(timeout_s), int((timeout_s % 1) * 1e9))
        self._syscall(self.number, addr, self._WAIT, expected, ctypes.addressof(ts), None, 0)

    def wake(self, addr: int) -> None:
        self._syscall(self.number, addr, self._WAKE, _MASK, None, None, 0)


_futex = _Futex()


@functools.cache
def _int64s(count: int) -> struct.Struct:
    """Packs ``count`` int64s: one call instead of a Python loop over a memoryview."""
    return struct.Struct(f"{count}q")


def segment_name(job: str) -> str:
    """A name no other job or group can pick: the job id, the creator's pid, 48 random bits."""
    safe_job = "".join(c if c.isalnum() or c in "-_" else "_" for c in job)[:40] or "job"
    return f"{SEGMENT_PREFIX}{safe_job}-{os.getpid()}-{secrets.token_hex(6)}"


def layout(local_size: int, chunk_bytes: int) -> tuple[int, int]:
    """(bytes of the control area, total bytes) of a segment."""
    desc_bytes = 2 * local_size * (DESC_FIXED + local_size) * 8
    control = 3 * local_size * _LINE + desc_bytes
    control = (control + 4095) // 4096 * 4096
    return control, control + 2 * (local_size + 1) * chunk_bytes


class Segment:
    """A mapped POSIX shared-memory file under ``/dev/shm``."""

    def __init__(self, name: str, size: int, mm: mmap.mmap) -> None:
        self.name = name
        self.size = size
        self.mm = mm

    @property
    def path(self) -> str:
        return os.path.join(SHM_DIR, self.name)

    @classmethod
    def create(cls, name: str, size: int) -> Segment:
        """Create, size and map a new segment, readable and writable by its owner only."""
        path = os.path.join(SHM_DIR, name)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.fchmod(fd, 0o600)  # whatever the umask said
            try:
                # Reserve the pages now: a full tmpfs would otherwise SIGBUS a rank mid-copy.
                os.posix_fallocate(fd, 0, size)
            except OSError as e:
                raise CommError(
                    f"tenter.comm: cannot reserve {size} bytes in {SHM_DIR} ({e.strerror}). "
                    "Free space there (docker: --shm-size) or lower TENTER_COMM_CHUNK_BYTES."
                ) from e
            mm = mmap.mmap(fd, size)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            raise
        finally:
            os.close(fd)
        return cls(name, size, mm)

    @classmethod
    def attach(cls, name: str, size: int) -> Segment:
        fd = os.open(os.path.join(SHM_DIR, name), os.O_RDWR)
        try:
            mm = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return cls(name, size, mm)

    def unlink(self) -> None:
        """Remove the name; the memory lives on while any rank maps it."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def _pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            # A killed rank whose parent has not reaped it yet is a zombie: dead to us.
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class Channel:
    """The ranks of one host of one process group, joined by one :class:`Segment`.

    Offers barriers (:meth:`sync`), per-round buffers (:meth:`next_round`, :attr:`slots`,
    :attr:`result`) and descriptor exchange (:meth:`post`, :meth:`peer_desc`).
    """

    def __init__(
        self,
        segment: Segment,
        local_size: int,
        local_index: int,
        chunk_bytes: int,
        timeout_s: float,
        describe_rank: Callable[[int], str],
        group_label: str,
        fences: Fences,
    ) -> None:
        self.segment = segment
        self.fences = fences
        self._release = fences.release  # looked up once: arrive and wait are hot
        self._acquire = fences.acquire
        self._mm = segment.mm
        self.size = local_size
        self.me = local_index
        self.chunk_bytes = chunk_bytes
        self.timeout_s = timeout_s
        self._describe_rank = describe_rank
        self._group_label = group_label
        control, total = layout(local_size, chunk_bytes)
        if total > segment.size:
            raise CommError(f"tenter.comm: segment {segment.name} is too small")
        self._base = torch.frombuffer(segment.mm, dtype=torch.uint8, count=total)
        base_addr = self._base.data_ptr()
        self._ctl32 = memoryview(segment.mm)[:control].cast("i")
        self._ctl64 = memoryview(segment.mm)[:control].cast("q")
        words = _LINE // 4
        self._arrive = [i * words for i in range(local_size)]
        self._arrive_addr = [base_addr + i * _LINE for i in range(local_size)]
        self._sleeping = [(local_size + i) * words for i in range(local_size)]
        self._pid = [(2 * local_size + i) * (_LINE // 8) for i in range(local_size)]
        self.desc_len = DESC_FIXED + local_size
        desc0 = 3 * local_size * _LINE  # bytes
        self._desc_at = [
            [desc0 + 8 * (parity * local_size + i) * self.desc_len for i in range(local_size)]
            for parity in (0, 1)
        ]
        self.peers = [i for i in range(local_size) if i != local_index]
        self._peer_sleeping = [self._sleeping[i] for i in self.peers]
        data = self._base[control : control + 2 * local_size * chunk_bytes]
        self.slots = data.view(2, local_size, chunk_bytes)
        """``slots[parity, local_rank]``: staging buffers, uint8."""
        self.result = self._base[control + 2 * local_size * chunk_bytes : total].view(
            2, chunk_bytes
        )
        """``result[parity]``: reduced chunks, uint8."""
        self._count = 0
        self._round = 0
        self.current: tuple[enum.Enum, int] | None = None
        """The collective under way and its sequence number; formatted only for errors."""
        self._ctl64[self._pid[local_index]] = os.getpid()

    @property
    def op_label(self) -> str:
        if self.current is None:
            return "init"
        op, seq = self.current
        return f"{op.name.lower()} (collective #{seq} of this group)"

    def next_round(self) -> int:
        """Start a round; returns the parity of the buffers it may write."""
        parity = self._round & 1
        self._round += 1
        return parity

    def post(self, parity: int, fields: Sequence[int]) -> None:
        """Publish this rank's descriptor for the round of ``parity``."""
        _int64s(len(fields)).pack_into(self._mm, self._desc_at[parity][self.me], *fields)

    def peer_desc(self, parity: int, index: int, count: int) -> tuple[int, ...]:
        return _int64s(count).unpack_from(self._mm, self._desc_at[parity][index])

    def peers_posted(self, parity: int, fields: tuple[int, ...]) -> bool:
        """Whether every peer's descriptor for ``parity`` starts with ``fields``: the
        cheap check of the latency path, before any detailed comparison."""
        unpack, mm, at = _int64s(len(fields)).unpack_from, self._mm, self._desc_at[parity]
        for p in self.peers:  # noqa: SIM110  # all(generator) costs a microsecond more
            if unpack(mm, at[p]) != fields:
                return False
        return True

    def sync(self) -> None:
        """Arrive at the next barrier and wait until every local rank has arrived."""
        self.arrive()
        self.wait()

    def arrive(self) -> None:
        """Arrive at the next barrier (wakes peers asleep on this rank's flag)."""
        self._count = c = (self._count + 1) & _MASK
        ctl = self._ctl32
        self._release()  # what this rank wrote and read so far, before its flag
        ctl[self._arrive[self.me]] = c
        for s in self._peer_sleeping:
            if ctl[s]:
                _futex.wake(self._arrive_addr[self.me])
                break

    def wait(self) -> None:
        """Wait until every local rank has arrived at the barrier this rank last arrived at."""
        c, ctl = self._count, self._ctl32
        for p in self.peers:
            if (ctl[self._arrive[p]] - c) & _MASK >= _HALF:
                self._wait(p, c)
        self._acquire()  # the peers' flags, before what they wrote

    def poll(self, spin_s: float) -> bool:
        """Whether every local rank arrives at this rank's last barrier before this thread
        has spun for ``spin_s`` of its own CPU time. CPU time, not wall time: where ranks
        share a core, each yield lets a peer run for a while, and that should not count.
        On the latency path, so written as plain loops: a generator costs a microsecond."""
        c, ctl, arrive, peers = self._count, self._ctl32, self._arrive, self.peers
        start = time.thread_time()
        while True:
            for p in peers:
                if (ctl[arrive[p]] - c) & _MASK >= _HALF:
                    break
            else:
                self._acquire()  # as in wait
                return True
            if time.thread_time() - start >= spin_s:
                return False
            os.sched_yield()

    def _wait(self, peer: int, target: int) -> None:
        ctl = self._ctl32
        idx = self._arrive[peer]
        spin_start = time.thread_time()  # CPU time, as in poll
        while time.thread_time() - spin_start < _SPIN_S:
            os.sched_yield()  # drops the GIL and lets a peer sharing this core run
            if (ctl[idx] - target) & _MASK < _HALF:
                return
        start = time.monotonic()
        ctl[self._sleeping[self.me]] = 1
        backoff = 50e-6
        try:
            next_liveness = start + _LIVENESS_PERIOD_S
            while True:
                value = ctl[idx]
                if (value - target) & _MASK < _HALF:
                    return
                now = time.monotonic()
                if now - start > self.timeout_s:
                    raise self._timeout_error(target)
                if now >= next_liveness:
                    self._check_peers_alive(target)
                    next_liveness = now + _LIVENESS_PERIOD_S
                if _futex.available:
                    _futex.wait(self._arrive_addr[peer], value, _SLEEP_SLICE_S)
                else:
                    time.sleep(backoff)
                    backoff = min(backoff * 2, 1e-3)
        finally:
            ctl[self._sleeping[self.me]] = 0

    def _missing(self, target: int) -> list[int]:
        ctl = self._ctl32
        return [p for p in self.peers if (ctl[self._arrive[p]] - target) & _MASK >= _HALF]

    def _timeout_error(self, target: int) -> CommTimeoutError:
        missing = self._missing(target)
        who = ", ".join(self._describe_rank(p) for p in missing)
        return CommTimeoutError(
            f"tenter.comm: {self.op_label} on process group {self._group_label} did not "
            f"complete within {self.timeout_s:g} s: rank(s) {who} never arrived. They are "
            "stuck elsewhere or called a different number of collectives; if they are only "
            "slow, pass a longer timeout to init_process_group/new_group.",
            missing,
        )

    def _check_peers_alive(self, target: int) -> None:
        for p in self._missing(target):
            pid = self._ctl64[self._pid[p]]
            if not _pid_alive(pid):
                raise CommPeerDiedError(
                    f"tenter.comm: rank {self._describe_rank(p)} (pid {pid}) exited while "
                    f"this rank waited for it in {self.op_label} on process group "
                    f"{self._group_label}."
                )

    def close(self) -> None:
        """Drop this process's views and mapping (the name is already unlinked)."""
        for view in (self._ctl32, self._ctl64):
            view.release()
        del self._base, self.slots, self.result
        with contextlib.suppress(BufferError):
            self.segment.mm.close()
