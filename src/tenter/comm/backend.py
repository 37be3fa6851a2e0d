"""The ``tenter`` torch.distributed backend: a Python ``ProcessGroup``.

How a call flows::

    dist.all_reduce(t)            DDP's reducer (C++)
          |                               |
    TenterProcessGroup.allreduce  <-------+   (torch's PyProcessGroup trampoline)
          |  CUDA tensors: returned straight from an internal ProcessGroupNCCL
          |  CPU tensors: validated here, then queued
    worker thread (one per group) runs, in call order:
          one host:   ShmCollectives over /dev/shm          (tenter.comm.algorithms)
          several:    all_reduce hierarchically: shm reduce to the host's leader,
                      gloo all_reduce among leaders, shm broadcast from the leader;
                      other collectives: gloo over the whole group
          |
    TenterWork (its torch Future completes on the worker thread, so DDP's bucket
    callbacks and comm hooks chain on it while backward goes on in the caller's thread)

send/recv always go through the group's gloo backend (point-to-point is not on any hot
path tenter targets). The group is unusable after a collective fails (timeout, mismatch,
dead peer): the ranks' shared-memory state no longer agrees, so later calls raise
:class:`CommShutdownError` naming the first failure.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import functools
import os
import queue
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import (
    AllgatherOptions,
    AllreduceCoalescedOptions,
    AllreduceOptions,
    AllToAllOptions,
    BarrierOptions,
    BroadcastOptions,
    GatherOptions,
    ProcessGroupGloo,
    ReduceOptions,
    ReduceScatterOptions,
    ScatterOptions,
)
from torch._C._distributed_c10d import Work as _C10dWork

from tenter.comm.algorithms import DTYPES, Reduction, ShmCollectives
from tenter.comm.errors import CommError, CommShutdownError
from tenter.comm.shm import SHM_DIR, Channel, Segment, layout, segment_name
from tenter.comm.topology import Topology, exchange

BACKEND_NAME = "tenter"
MIN_CHUNK_BYTES = 1 << 20
ROUND_WORKING_SET_BYTES = 8 << 20
"""What one round of a collective should touch per rank, so that a peer reads the staged
data from the shared last-level cache rather than from memory."""
DEFAULT_SMALL_BYTES = 256 << 10
_INLINE_SPIN_S = 50e-6  # how long the caller's thread waits for late peers itself

_REDUCTIONS = {r.name: r for r in Reduction}
_TORCH_VERSION = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_SUPPORTED_DTYPES = frozenset(DTYPES)

Tensors = list[torch.Tensor]
_AnyWork = TypeVar("_AnyWork")


def _env_bytes(name: str, default: int, minimum: int) -> int:
    value = os.environ.get(name)
    if not value:
        return default
    try:
        parsed = int(value)
    except ValueError as e:
        raise ValueError(f"{name}={value!r} is not a byte count; set an integer.") from e
    if parsed < minimum:
        raise ValueError(f"{name}={parsed} is below the minimum of {minimum} bytes.")
    return parsed


def _chunk_bytes(local_size: int) -> int:
    """Bytes per rank per round: ``TENTER_COMM_CHUNK_BYTES``, else
    ``ROUND_WORKING_SET_BYTES / local ranks`` between 1 and 4 MiB, less if /dev/shm is short
    (at most 1/8 of its free space). Rounds whose buffers stay in cache beat large rounds
    with fewer barriers: on the 2-core test machine a 16 MB all_reduce of 2 ranks took
    3.8 ms with 4 MiB chunks and 6.0 ms with 16 MiB ones."""
    if os.environ.get("TENTER_COMM_CHUNK_BYTES"):
        return _env_bytes("TENTER_COMM_CHUNK_BYTES", MIN_CHUNK_BYTES, 4096) // 64 * 64
    try:
        stats = os.statvfs(SHM_DIR)
        budget = stats.f_bavail * stats.f_frsize // 8 // (2 * (local_size + 1))
    except OSError:
        budget = 0
    chunk = min(4 * MIN_CHUNK_BYTES, ROUND_WORKING_SET_BYTES // local_size, budget)
    return max(MIN_CHUNK_BYTES, chunk) // 4096 * 4096


def _reduction(op: Any, dtype: torch.dtype) -> tuple[Reduction, bool]:
    """(kernel reduction, divide-by-world-size afterwards) for a ``ReduceOp``."""
    return _reduction_of(getattr(op, "op", op), dtype)


@functools.cache
def _reduction_of(kind: Any, dtype: torch.dtype) -> tuple[Reduction, bool]:
    # Cached: this runs on every call, and the latency path is a few tens of microseconds.
    name = getattr(kind, "name", str(kind).rsplit(".", 1)[-1])
    if name == "AVG":
        if dtype not in _FLOAT_DTYPES:
            raise ValueError(
                f"ReduceOp.AVG needs a floating dtype, got {dtype}; use SUM and divide."
            )
        return Reduction.SUM, True
    if name not in _REDUCTIONS:
        raise ValueError(
            f"tenter.comm does not support ReduceOp.{name}; use one of "
            f"{', '.join([*_REDUCTIONS, 'AVG'])}."
        )
    red = _REDUCTIONS[name]
    if red in (Reduction.BAND, Reduction.BOR, Reduction.BXOR) and (
        dtype.is_floating_point or dtype.is_complex
    ):
        raise ValueError(f"ReduceOp.{name} needs an integer or bool dtype, got {dtype}.")
    if red in (Reduction.MIN, Reduction.MAX) and dtype.is_complex:
        raise ValueError(f"ReduceOp.{name} is not defined for complex dtype {dtype}.")
    return red, False


def _check_dtype(t: torch.Tensor) -> None:
    if t.dtype not in _SUPPORTED_DTYPES:
        raise ValueError(f"tenter.comm does not support dtype {t.dtype}.")
    if not t.is_cpu:
        raise ValueError(f"tenter.comm: expected a CPU tensor, got one on {t.device}.")


class _Flat:
    """A flat contiguous view of a tensor, or a copy that is written back on ``done``."""

    def __init__(self, t: torch.Tensor, read: bool = True) -> None:
        _check_dtype(t)
        self.orig = t
        if t.is_contiguous():
            self.flat = t.view(-1)
            self.copied = False
        else:
            self.flat = (t.contiguous() if read else torch.empty_like(t).contiguous()).view(-1)
            self.copied = True

    def done(self) -> None:
        if self.copied:
            self.orig.copy_(self.flat.view(self.orig.shape))


# torch's stubs type the Python-facing overloads of these classes, not the C++ virtuals a
# subclass overrides (different names and arguments), so the bases are taken untyped.
_WorkBase: Any = _C10dWork
_ProcessGroupBase: Any = dist.ProcessGroup
WorkLike = Any
"""A :class:`TenterWork`, or the ``Work`` of the gloo/NCCL backend a call was handed to."""


class TenterWork(_WorkBase):  # type: ignore[misc]
    """A collective in flight; its future completes on the group's worker thread."""

    def __init__(self, future: torch.futures.Future[object]) -> None:
        super().__init__()
        self._future = future
        # Waiting on an Event rather than in Future.wait() (C++, GIL released, no signal
        # checks) keeps the main thread interruptible: Ctrl-C works inside a collective.
        # A collective that finished in the caller's thread needs neither.
        self._done: threading.Event | None = None
        if not future.done():
            done = self._done = threading.Event()
            future.add_done_callback(lambda _: done.set())

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        if self._done is not None:
            self._done.wait()
        self._future.wait()  # raises the collective's error, if any
        return True

    def get_future(self) -> torch.futures.Future[object]:
        return self._future

    def is_completed(self) -> bool:
        return bool(self._future.done())

    def is_success(self) -> bool:
        if not self._future.done():
            return False
        try:
            self._future.value()
        except Exception:
            return False
        return True


class CompletedWork(_WorkBase):  # type: ignore[misc]
    """A collective that finished in the caller's thread (the latency path): nothing to
    wait for, and its future is built only when asked for (DDP asks, a plain
    ``dist.all_reduce`` does not), saving the Future and the Event a TenterWork needs."""

    def __init__(self, result: object) -> None:
        super().__init__()
        self._result = result

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        return True

    def get_future(self) -> torch.futures.Future[object]:
        future: torch.futures.Future[object] = torch.futures.Future()
        future.set_result(self._result)
        return future

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True


class _Worker:
    """One thread per group running its collectives in call order.

    ``pending`` counts submitted, unfinished collectives and ``running`` is held while one
    executes, so the caller's thread may run a small collective itself when nothing is
    queued (see ``TenterProcessGroup._allreduce_inline``) without overtaking the queue.
    """

    def __init__(self, name: str) -> None:
        self._queue: queue.SimpleQueue[
            tuple[Callable[[], object], torch.futures.Future[object]] | None
        ] = queue.SimpleQueue()
        self.lock = threading.Lock()
        self.running = threading.Lock()
        self.pending = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[], object]) -> torch.futures.Future[object]:
        future: torch.futures.Future[object] = torch.futures.Future()
        with self.lock:
            self.pending += 1
            self._queue.put((fn, future))
        return future

    def stop(self) -> None:
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=1)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            fn, future = item
            error: BaseException | None = None
            with self.running:
                try:
                    result = fn()
                except BaseException as e:
                    error = e
            # The closure refers to the group, and completing the future may let the caller
            # drop its last reference to it; the group's collection is what stops this
            # thread where destroy_process_group does not call shutdown() (torch 2.5).
            del item, fn
            with self.lock:
                self.pending -= 1
            # Callbacks chained with then() (DDP's bucket hooks) run here, in this thread.
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(result)


def _gloo_options(timeout: datetime.timedelta) -> Any:
    """Gloo options binding to this simulated host's loopback address when tenter's
    launcher gave one, so the inter-host hop really crosses "hosts"."""
    addr = os.environ.get("TENTER_HOST_ADDR")
    if not addr:
        return timeout
    opts = getattr(ProcessGroupGloo, "_Options")()  # noqa: B009  # private, not in the stubs
    opts._timeout = timeout
    opts._devices = [ProcessGroupGloo.create_device(hostname=addr)]
    return opts


class TenterProcessGroup(_ProcessGroupBase):  # type: ignore[misc]
    """A process group whose CPU collectives run over shared memory within a host.

    Created by ``init_process_group("tenter")`` / ``new_group(backend="tenter")``; see
    :mod:`tenter.comm` for the user-facing description.
    """

    def __init__(
        self,
        store: Any,
        rank: int,
        size: int,
        timeout: datetime.timedelta,
        group_name: str = "",
        global_ranks: Sequence[int] = (),
    ) -> None:
        super().__init__(rank, size)
        self._rank = rank
        self._size = size
        self._timeout = timeout
        self._label = f"'{group_name}'" if group_name else "(unnamed)"
        self._group_name = group_name
        self._group_desc = ""
        self._global = list(global_ranks) or list(range(size))
        self._seq = 0
        self._failure: BaseException | None = None
        self._closed = False
        self.topology: Topology = exchange(store, rank, size)
        topo = self.topology
        # A function of plain data, not a bound method: the channel and the collectives keep
        # it, and a reference back to this group would make it a cycle that only the
        # garbage collector frees, perhaps at interpreter exit, when destroying the inner
        # gloo groups aborts the process.
        self._describe_local = functools.partial(
            _describe_local_rank, tuple(self._global), tuple(topo.local_ranks)
        )
        self._local: ShmCollectives | None = None
        self._channel: Channel | None = None
        if len(topo.local_ranks) > 1:
            self._channel = self._open_channel(store)
            small = _env_bytes("TENTER_COMM_SMALL_BYTES", DEFAULT_SMALL_BYTES, 0)
            self._local = ShmCollectives(self._channel, small, self._describe_local)
        # gloo over the whole group serves send/recv and, across hosts, the collectives
        # other than all_reduce; it must be created now, by every rank together.
        self._gloo = ProcessGroupGloo(
            dist.PrefixStore("tenter/gloo", store), rank, size, _gloo_options(timeout)
        )
        # A group with no C++ backend has nowhere to keep its name (functional collectives
        # and DeviceMesh resolve groups by name) and reports no device; registering gloo
        # for CPU fixes both. Collectives still come here: Python callers find these
        # methods first and C++ callers reach them through torch's trampoline.
        self._register_backend(
            torch.device("cpu"), dist.ProcessGroup.BackendType.CUSTOM, self._gloo
        )
        self._leaders: Any = None
        if topo.num_hosts > 1 and topo.is_leader:
            self._leaders = ProcessGroupGloo(
                dist.PrefixStore("tenter/leaders", store),
                topo.host_index,
                topo.num_hosts,
                _gloo_options(timeout),
            )
        self._nccl: Any = None
        if torch.cuda.is_available() and dist.is_nccl_available():
            # Communicators are created lazily by NCCL, so this costs nothing for CPU jobs.
            nccl_opts = dist.ProcessGroupNCCL.Options()
            nccl_opts._timeout = timeout
            self._nccl = dist.ProcessGroupNCCL(
                dist.PrefixStore("tenter/nccl", store), rank, size, nccl_opts
            )
        self._recent: collections.deque[object] | None = (
            collections.deque(maxlen=8) if _TORCH_VERSION < (2, 13) else None
        )
        self._worker = _Worker(f"tenter-comm-{group_name or rank}")
        self._finalizer = weakref.finalize(self, _shutdown, self._worker, self._channel)

    # -- setup -------------------------------------------------------------------------

    def _open_channel(self, store: Any) -> Channel:
        topo = self.topology
        local_size = len(topo.local_ranks)
        key = f"tenter/shm/{topo.host_index}"
        job = os.environ.get("TENTER_JOB_ID") or os.environ.get("TORCHELASTIC_RUN_ID") or "job"
        if topo.is_leader:
            chunk = _chunk_bytes(local_size)
            segment = Segment.create(segment_name(job), layout(local_size, chunk)[1])
            store.set(key, f"{segment.name}:{chunk}")
        else:
            name, chunk_text = store.get(key).decode().rsplit(":", 1)
            chunk = int(chunk_text)
            segment = Segment.attach(name, layout(local_size, chunk)[1])
        try:
            if store.add(f"{key}/attached", 1) == local_size:
                store.set(f"{key}/ready", "1")
            store.wait([f"{key}/ready"])
            return Channel(
                segment,
                local_size,
                topo.local_index,
                chunk,
                self._timeout.total_seconds(),
                self._describe_local,
                self._label,
            )
        finally:
            # Everyone has it mapped (or init failed): drop the name so nothing is left in
            # /dev/shm however this job ends.
            segment.unlink()

    # -- plumbing ----------------------------------------------------------------------

    def getBackendName(self) -> str:  # C++ virtual's name
        return BACKEND_NAME

    def _enqueue(
        self, name: str, fn: Callable[[int], None], result: object, seq: int | None = None
    ) -> TenterWork:
        if self._closed:
            raise CommShutdownError(f"tenter.comm: {name} on a shut-down process group.")
        if seq is None:
            seq = self._seq
            self._seq += 1

        def run() -> object:
            if self._failure is not None:
                raise CommShutdownError(
                    f"tenter.comm: {name} (collective #{seq}) on process group "
                    f"{self._label} cannot run: the group failed earlier: {self._failure}"
                ) from self._failure
            try:
                fn(seq)
            except BaseException as e:
                self._failure = e
                raise
            return result

        return self._keep(TenterWork(self._worker.submit(run)))

    def _keep(self, work: _AnyWork) -> _AnyWork:
        """Before torch 2.13 the trampoline does not own the Python Work it returns to C++
        (DDP's reducer), so once Python drops it C++ finds no ``get_future`` override;
        holding the last few keeps them alive until C++ has asked."""
        if self._recent is not None:
            self._recent.append(work)
        return work

    @staticmethod
    def _cuda(tensors: Sequence[torch.Tensor]) -> bool:
        return any(t.is_cuda for t in tensors)

    def _nccl_call(self, names: Sequence[str], *args: Any) -> Any:
        """Hand a CUDA collective to NCCL, under whichever method name this torch has."""
        if self._nccl is None:
            raise ValueError("tenter.comm: CUDA tensors need NCCL, which is not available.")
        for name in names:
            method = getattr(self._nccl, name, None)
            if method is not None:
                return method(*args)
        raise ValueError(f"tenter.comm: this torch's NCCL backend has no {names[0]}.")

    def _gloo_wait(self, name: str, *args: Any) -> None:
        if self._gloo is None:
            raise CommError(f"tenter.comm: {name} needs a group of more than one rank.")
        getattr(self._gloo, name)(*args).wait()

    @property
    def _single_host(self) -> bool:
        return self.topology.num_hosts == 1

    # -- all_reduce --------------------------------------------------------------------

    def allreduce(self, tensors: Tensors, opts: Any = None) -> WorkLike:
        opts = opts if opts is not None else AllreduceOptions()
        if len(tensors) == 1:
            work = self._allreduce_inline(tensors, opts.reduceOp)
            if work is not None:
                return work
        if self._cuda(tensors):
            return self._nccl_call(["allreduce"], tensors, opts)
        flats = [_Flat(t) for t in tensors]
        reds = [_reduction(opts.reduceOp, t.dtype) for t in tensors]

        def run(seq: int) -> None:
            for flat, (red, avg) in zip(flats, reds, strict=True):
                self._all_reduce(flat.flat, red, avg, seq)
                flat.done()

        return self._enqueue("all_reduce", run, tensors)

    def _allreduce_inline(self, tensors: Tensors, op: Any) -> WorkLike | None:
        """The latency path: a small all_reduce with nothing queued runs in the caller's
        thread, saving two thread hand-offs. It publishes its data and arrives, then
        spins briefly; if a peer is late, the rest (wait + reduce) goes to the worker so
        the caller (DDP's backward) is never held up by a slow peer. Every microsecond
        here is Python on the critical path of each step, so it avoids what the general
        path builds (``_Flat``, futures, events)."""
        (t,) = tensors
        local, worker = self._local, self._worker
        if (
            local is None
            or not t.is_cpu
            or t.nbytes > local.small_bytes
            or not t.is_contiguous()
            or t.dtype not in _SUPPORTED_DTYPES  # the general path names the problem
            or self.topology.num_hosts != 1
            or self._closed
            or self._failure is not None
        ):
            return None
        red, avg = _reduction(op, t.dtype)
        flat = t if t.dim() == 1 else t.view(-1)
        with worker.lock:
            if worker.pending or not worker.running.acquire(blocking=False):
                return None
            worker.pending += 1
        seq = self._seq
        self._seq += 1
        finished = False
        try:
            state = local.small_all_reduce_start(flat, red, seq)
            if local.ch.poll(_INLINE_SPIN_S):
                local.small_all_reduce_finish(state, arrived=True)
                if avg:
                    t.div_(self._size)
                finished = True
        except BaseException as e:
            self._failure = e
            finished = True
            raise
        finally:
            worker.running.release()
            if finished:
                with worker.lock:
                    worker.pending -= 1
        if finished:
            return self._keep(CompletedWork(tensors))

        def finish(seq: int) -> None:
            local.small_all_reduce_finish(state)
            if avg:
                t.div_(self._size)

        work = self._enqueue("all_reduce", finish, tensors, seq)
        with worker.lock:
            worker.pending -= 1  # the queued half now holds the count for this collective
        return work

    def allreduce_coalesced(self, tensors: Tensors, opts: Any = None) -> WorkLike:
        opts = opts if opts is not None else AllreduceCoalescedOptions()
        single = AllreduceOptions()
        single.reduceOp = opts.reduceOp
        return self.allreduce(tensors, single)

    def _all_reduce(self, t: torch.Tensor, red: Reduction, avg: bool, seq: int) -> None:
        if self._single_host:
            if self._local is not None:
                self._local.all_reduce(t, red, seq)
        else:
            # Hierarchical: the host's ranks reduce over shm into the leader, the leaders
            # all-reduce over gloo, the leader broadcasts the result over shm.
            if self._local is not None:
                self._local.reduce(t, 0, red, seq)
            if self._leaders is not None:
                self._leaders_all_reduce(t, red)
            if self._local is not None:
                self._local.broadcast(t, 0, seq)
        if avg:
            t.div_(self._size)

    def _leaders_all_reduce(self, t: torch.Tensor, red: Reduction) -> None:
        name = red.name
        if t.dtype == torch.bool:
            # gloo has no bool: as bytes, OR is MAX and AND is MIN.
            t = t.view(torch.uint8)
            name = {"SUM": "MAX", "PRODUCT": "MIN"}.get(name, name)
        opts = AllreduceOptions()
        opts.reduceOp = getattr(dist.ReduceOp, name)
        self._leaders.allreduce([t], opts).wait()

    # -- broadcast / reduce ------------------------------------------------------------

    def broadcast(self, tensors: Tensors, opts: Any = None) -> WorkLike:
        opts = opts if opts is not None else BroadcastOptions()
        if self._cuda(tensors):
            return self._nccl_call(["broadcast"], tensors, opts)
        flats = [_Flat(t) for t in tensors]
        root = opts.rootRank

        def run(seq: int) -> None:
            for flat in flats:
                if self._single_host and self._local is not None:
                    self._local.broadcast(flat.flat, root, seq)
                elif not self._single_host:
                    self._gloo_wait("broadcast", [flat.flat], opts)
                flat.done()

        return self._enqueue("broadcast", run, tensors)

    def reduce(self, tensors: Tensors, opts: Any = None) -> WorkLike:
        opts = opts if opts is not None else ReduceOptions()
        if self._cuda(tensors):
            return self._nccl_call(["reduce"], tensors, opts)
        flats = [_Flat(t) for t in tensors]
        reds = [_reduction(opts.reduceOp, t.dtype) for t in tensors]
        root = opts.rootRank

        def run(seq: int) -> None:
            for flat, (red, avg) in zip(flats, reds, strict=True):
                if self._single_host:
                    if self._local is not None:
                        self._local.reduce(flat.flat, root, red, seq)
                else:
                    gloo_opts = ReduceOptions()
                    gloo_opts.reduceOp = getattr(dist.ReduceOp, red.name)
                    gloo_opts.rootRank = root
                    # gloo uses non-root tensors as scratch; torch's own backends leave them
                    # alone in practice and so do we.
                    buf = flat.flat if self._rank == root else flat.flat.clone()
                    self._gloo_wait("reduce", [buf], gloo_opts)
                if avg and self._rank == root:
                    flat.flat.div_(self._size)
                flat.done()

        return self._enqueue("reduce", run, tensors)

    # -- all_gather --------------------------------------------------------------------

    def allgather(self, output_lists: list[Tensors], inputs: Tensors, opts: Any = None) -> WorkLike:
        opts = opts if opts is not None else AllgatherOptions()
        if self._cuda(inputs):
            return self._nccl_call(["allgather"], output_lists, inputs, opts)
        self._expect(len(output_lists) == len(inputs), "allgather: one output list per input")
        jobs = []
        for outs, inp in zip(output_lists, inputs, strict=True):
            self._expect(len(outs) == self._size, f"allgather: needs {self._size} outputs")
            self._same_dtype(inp, outs)
            jobs.append((_Flat(inp), [_Flat(o, read=False) for o in outs]))

        def run(seq: int) -> None:
            for inp, outs in jobs:
                if self._single_host and self._local is not None:
                    self._local.all_gather(inp.flat, [o.flat for o in outs], seq=seq)
                elif self._single_host:
                    outs[0].flat.copy_(inp.flat)
                else:
                    self._gloo_wait("allgather", [[o.flat for o in outs]], [inp.flat], opts)
                for o in outs:
                    o.done()

        return self._enqueue("all_gather", run, output_lists)

    def all_gather_single(
        self, output: torch.Tensor, inp: torch.Tensor, opts: Any = None
    ) -> WorkLike:
        opts = opts if opts is not None else AllgatherOptions()
        if self._cuda([inp]):
            return self._nccl_call(["all_gather_single", "_allgather_base"], output, inp, opts)
        self._same_dtype(inp, [output])
        self._expect(
            output.numel() == inp.numel() * self._size,
            f"all_gather_into_tensor: output has {output.numel()} elements, expected "
            f"{self._size} x {inp.numel()}",
        )
        src, dst = _Flat(inp), _Flat(output, read=False)

        def run(seq: int) -> None:
            matrix = dst.flat.view(self._size, -1)
            if self._single_host and self._local is not None:
                self._local.all_gather(src.flat, list(matrix), matrix, seq=seq)
            elif self._single_host:
                dst.flat.copy_(src.flat)
            else:
                self._gloo_wait("_allgather_base", dst.flat, src.flat, opts)
            dst.done()

        return self._enqueue("all_gather_into_tensor", run, [output])

    _allgather_base = all_gather_single  # the name before torch 2.8

    def allgather_coalesced(
        self, output_lists: list[Tensors], inputs: Tensors, opts: Any = None
    ) -> WorkLike:
        return self.allgather(output_lists, inputs, opts)

    def all_gather_single_coalesced(
        self, outputs: Tensors, inputs: Tensors, opts: Any = None
    ) -> WorkLike:
        works = [self.all_gather_single(o, i, opts) for o, i in zip(outputs, inputs, strict=True)]
        return self._last(works, outputs)

    allgather_into_tensor_coalesced = all_gather_single_coalesced  # the name before 2.8

    # -- reduce_scatter ----------------------------------------------------------------

    def reduce_scatter(
        self, outputs: Tensors, input_lists: list[Tensors], opts: Any = None
    ) -> WorkLike:
        opts = opts if opts is not None else ReduceScatterOptions()
        if self._cuda(outputs):
            return self._nccl_call(["reduce_scatter"], outputs, input_lists, opts)
        jobs = []
        for out, ins in zip(outputs, input_lists, strict=True):
            self._expect(len(ins) == self._size, f"reduce_scatter: needs {self._size} inputs")
            self._same_dtype(out, ins)
            for i in ins:
                self._expect(i.numel() == out.numel(), "reduce_scatter: unequal input sizes")
            red, avg = _reduction(opts.reduceOp, out.dtype)
            jobs.append((_Flat(out, read=False), [_Flat(i) for i in ins], red, avg))

        def run(seq: int) -> None:
            for out, ins, red, avg in jobs:
                if self._single_host and self._local is not None:
                    self._local.reduce_scatter([i.flat for i in ins], out.flat, red, seq)
                elif self._single_host:
                    out.flat.copy_(ins[0].flat)
                else:
                    self._gloo_reduce_scatter(out.flat, torch.cat([i.flat for i in ins]), red, seq)
                if avg:
                    out.flat.div_(self._size)
                out.done()

        return self._enqueue("reduce_scatter", run, outputs)

    def reduce_scatter_single(
        self, output: torch.Tensor, inp: torch.Tensor, opts: Any = None
    ) -> WorkLike:
        opts = opts if opts is not None else ReduceScatterOptions()
        if self._cuda([inp]):
            names = ["reduce_scatter_single", "_reduce_scatter_base"]
            return self._nccl_call(names, output, inp, opts)
        self._same_dtype(inp, [output])
        self._expect(
            inp.numel() == output.numel() * self._size,
            f"reduce_scatter_tensor: input has {inp.numel()} elements, expected "
            f"{self._size} x {output.numel()}",
        )
        red, avg = _reduction(opts.reduceOp, output.dtype)
        src, dst = _Flat(inp), _Flat(output, read=False)

        def run(seq: int) -> None:
            matrix = src.flat.view(self._size, -1)
            if self._single_host and self._local is not None:
                self._local.reduce_scatter(list(matrix), dst.flat, red, seq, matrix)
            elif self._single_host:
                dst.flat.copy_(src.flat)
            else:
                self._gloo_reduce_scatter(dst.flat, src.flat, red, seq)
            if avg:
                dst.flat.div_(self._size)
            dst.done()

        return self._enqueue("reduce_scatter_tensor", run, [output])

    _reduce_scatter_base = reduce_scatter_single  # the name before torch 2.8

    def reduce_scatter_single_coalesced(
        self, outputs: Tensors, inputs: Tensors, opts: Any = None
    ) -> WorkLike:
        works = [
            self.reduce_scatter_single(o, i, opts) for o, i in zip(outputs, inputs, strict=True)
        ]
        return self._last(works, outputs)

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced  # the name before 2.8

    def _gloo_reduce_scatter(
        self, out: torch.Tensor, full: torch.Tensor, red: Reduction, seq: int
    ) -> None:
        # gloo's reduce_scatter lacks dtypes and ops; the hierarchical all_reduce of a
        # copy has them all, and only our part is kept.
        scratch = full.clone()
        self._all_reduce(scratch, red, False, seq)
        out.copy_(scratch.view(self._size, -1)[self._rank])

    # -- all_to_all --------------------------------------------------------------------

    def all_to_all_single(
        self,
        output: torch.Tensor,
        inp: torch.Tensor,
        output_split_sizes: list[int],
        input_split_sizes: list[int],
        opts: Any = None,
    ) -> WorkLike:
        opts = opts if opts is not None else AllToAllOptions()
        if self._cuda([inp]):
            names = ["all_to_all_single", "alltoall_base"]
            return self._nccl_call(names, output, inp, output_split_sizes, input_split_sizes, opts)
        self._same_dtype(inp, [output])
        src, dst = _Flat(inp), _Flat(output, read=False)
        ins = self._split(src.flat, inp, input_split_sizes, "input")
        outs = self._split(dst.flat, output, output_split_sizes, "output")

        def run(seq: int) -> None:
            if self._single_host and self._local is not None:
                self._local.all_to_all(ins, outs, seq)
            elif self._single_host:
                dst.flat.copy_(src.flat)
            else:
                self._gloo_wait(
                    "alltoall_base",
                    dst.flat.view(output.shape),  # gloo splits along dim 0
                    src.flat.view(inp.shape),
                    output_split_sizes,
                    input_split_sizes,
                    opts,
                )
            dst.done()

        return self._enqueue("all_to_all_single", run, [output])

    alltoall_base = all_to_all_single  # the name before torch 2.8

    def _split(self, flat: torch.Tensor, t: torch.Tensor, splits: list[int], what: str) -> Tensors:
        """Blocks of ``flat`` per rank: ``splits`` rows of ``t``'s dim 0 (equal if empty)."""
        rows = t.shape[0] if t.dim() else 1
        row = t.numel() // rows if rows else 0
        if not splits:
            self._expect(rows % self._size == 0, f"all_to_all: {what} rows not divisible")
            splits = [rows // self._size] * self._size
        self._expect(
            len(splits) == self._size and sum(splits) == rows,
            f"all_to_all: {what} split sizes {splits} do not cover {rows} rows in "
            f"{self._size} parts",
        )
        blocks, at = [], 0
        for s in splits:
            blocks.append(flat[at : at + s * row])
            at += s * row
        return blocks

    def alltoall(self, outputs: Tensors, inputs: Tensors, opts: Any = None) -> WorkLike:
        opts = opts if opts is not None else AllToAllOptions()
        if self._cuda(inputs):
            return self._nccl_call(["alltoall"], outputs, inputs, opts)
        self._expect(len(outputs) == len(inputs) == self._size, "all_to_all: list sizes")
        self._same_dtype(inputs[0], [*inputs, *outputs])
        ins = [_Flat(i) for i in inputs]
        outs = [_Flat(o, read=False) for o in outputs]

        def run(seq: int) -> None:
            if self._single_host and self._local is not None:
                self._local.all_to_all([i.flat for i in ins], [o.flat for o in outs], seq)
            elif self._single_host:
                outs[0].flat.copy_(ins[0].flat)
            else:
                # gloo before torch 2.6 has only the single-tensor all_to_all
                full_out = torch.empty(sum(o.flat.numel() for o in outs), dtype=outs[0].flat.dtype)
                self._gloo_wait(
                    "alltoall_base",
                    full_out,
                    torch.cat([i.flat for i in ins]),
                    [o.flat.numel() for o in outs],
                    [i.flat.numel() for i in ins],
                    opts,
                )
                at = 0
                for o in outs:
                    o.flat.copy_(full_out[at : at + o.flat.numel()])
                    at += o.flat.numel()
            for o in outs:
                o.done()

        return self._enqueue("all_to_all", run, outputs)

    # -- gather / scatter --------------------------------------------------------------

    def gather(self, output_lists: list[Tensors], inputs: Tensors, opts: Any = None) -> WorkLike:
        opts = opts if opts is not None else GatherOptions()
        if self._cuda(inputs):
            return self._nccl_call(["gather"], output_lists, inputs, opts)
        root = opts.rootRank
        inp = _Flat(inputs[0])
        outs = [_Flat(o, read=False) for o in (output_lists[0] if output_lists else [])]
        if self._rank == root:
            self._expect(len(outs) == self._size, f"gather: root needs {self._size} outputs")

        def run(seq: int) -> None:
            if self._single_host and self._local is not None:
                self._local.all_gather(inp.flat, [o.flat for o in outs], root=root, seq=seq)
            elif self._single_host:
                outs[0].flat.copy_(inp.flat)
            else:
                lists = [[o.flat for o in outs]] if outs else []
                self._gloo_wait("gather", lists, [inp.flat], opts)
            for o in outs:
                o.done()

        return self._enqueue("gather", run, output_lists)

    def scatter(self, outputs: Tensors, input_lists: list[Tensors], opts: Any = None) -> WorkLike:
        opts = opts if opts is not None else ScatterOptions()
        if self._cuda(outputs):
            return self._nccl_call(["scatter"], outputs, input_lists, opts)
        root = opts.rootRank
        out = _Flat(outputs[0], read=False)
        ins = [_Flat(i) for i in (input_lists[0] if input_lists else [])]
        if self._rank == root:
            self._expect(len(ins) == self._size, f"scatter: root needs {self._size} inputs")

        def run(seq: int) -> None:
            if self._single_host and self._local is not None:
                self._local.scatter([i.flat for i in ins], out.flat, root, seq)
            elif self._single_host:
                out.flat.copy_(ins[0].flat)
            else:
                lists = [[i.flat for i in ins]] if ins else []
                self._gloo_wait("scatter", [out.flat], lists, opts)
            out.done()

        return self._enqueue("scatter", run, outputs)

    # -- barrier, point-to-point -------------------------------------------------------

    def barrier(self, opts: Any = None) -> WorkLike:
        opts = opts if opts is not None else BarrierOptions()

        def run(seq: int) -> None:
            if self._single_host:
                if self._local is not None:
                    self._local.barrier(seq)
            else:
                self._gloo_wait("barrier", opts)

        return self._enqueue("barrier", run, [])

    def send(self, tensors: Tensors, dst: int, tag: int = 0) -> Any:
        if self._cuda(tensors):
            return self._nccl_call(["send"], tensors, dst, tag)
        return self._p2p().send(tensors, dst, tag)

    def recv(self, tensors: Tensors, src: int, tag: int = 0) -> Any:
        if self._cuda(tensors):
            return self._nccl_call(["recv"], tensors, src, tag)
        return self._p2p().recv(tensors, src, tag)

    def recv_anysource(self, tensors: Tensors, tag: int = 0) -> Any:
        return self._p2p().recv_anysource(tensors, tag)

    def _p2p(self) -> Any:
        if self._gloo is None:
            raise CommError("tenter.comm: send/recv need a group of more than one rank.")
        return self._gloo

    # -- lifecycle ---------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop the worker thread and unmap the segment (called by destroy_process_group)."""
        self._closed = True
        self._finalizer()

    def abort(self) -> None:
        self.shutdown()

    # -- helpers -----------------------------------------------------------------------

    @staticmethod
    def _expect(ok: bool, what: str) -> None:
        if not ok:
            raise ValueError(f"tenter.comm: {what}.")

    @staticmethod
    def _same_dtype(ref: torch.Tensor, others: Sequence[torch.Tensor]) -> None:
        for t in others:
            if t.dtype != ref.dtype:
                raise ValueError(
                    f"tenter.comm: tensors of one collective must share a dtype; got "
                    f"{ref.dtype} and {t.dtype}."
                )

    def _last(self, works: list[TenterWork], result: object) -> TenterWork:
        """One work for several queued ones: they run in order, so the last one's end is
        everyone's end; errors of earlier ones surface there too (the group fails)."""
        if not works:
            done: torch.futures.Future[object] = torch.futures.Future()
            done.set_result(result)
            return self._keep(TenterWork(done))
        last = works[-1].get_future()
        return self._keep(TenterWork(last.then(lambda _: result)))


def _describe_local_rank(
    global_ranks: Sequence[int], local_ranks: Sequence[int], local_index: int
) -> str:
    """How errors name a local rank: its group rank, and its global rank if different."""
    group_rank = local_ranks[local_index]
    global_rank = global_ranks[group_rank]
    if global_rank == group_rank:
        return str(group_rank)
    return f"{group_rank} (global rank {global_rank})"


def _shutdown(worker: _Worker, channel: Channel | None) -> None:
    worker.stop()
    if channel is not None:
        with contextlib.suppress(Exception):
            channel.close()


def create_backend(dist_opts: Any, backend_opts: Any = None) -> TenterProcessGroup:
    """The creator torch calls for ``init_process_group("tenter")`` and ``new_group``."""
    return TenterProcessGroup(
        dist_opts.store,
        dist_opts.group_rank,
        dist_opts.group_size,
        dist_opts.timeout,
        getattr(dist_opts, "group_id", ""),
        list(getattr(dist_opts, "global_ranks_in_group", []) or []),
    )


def register() -> None:
    """Register ``"tenter"`` with torch.distributed (idempotent)."""
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(
        BACKEND_NAME, create_backend, extended_api=True, devices=["cpu", "cuda"]
    )
