"""Functions the comm tests run on every rank of a world (see tests/world.py).

Each rank builds every rank's input from a seed, so it computes the expected result of a
collective locally; integer results must match exactly, floating ones to rounding (the
reference reduces in rank order, bf16/fp16 in their own precision). Every rank also
returns digests of its all_reduce results, so the test can assert all ranks agree bit
for bit.
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import signal
import time
from typing import Any

import torch
import torch.distributed as dist

from tests.world import side_store

DTYPES = (
    torch.float32,
    torch.float64,
    torch.bfloat16,
    torch.float16,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
)
OPS = ("SUM", "AVG", "MIN", "MAX", "PRODUCT")
SIZES = (0, 1, 13, 1000, 5000)  # with 4 KiB chunks, 5000 floats take the chunked path
SMALL_CHUNKS = {"TENTER_COMM_CHUNK_BYTES": "4096", "TENTER_COMM_SMALL_BYTES": "1024"}


def make(rank: int, n: int, dtype: torch.dtype, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1009 + rank)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype.is_floating_point:
        return torch.randn(n, generator=g, dtype=torch.float64).to(dtype)
    low = 0 if dtype == torch.uint8 else -4
    return torch.randint(low, 5, (n,), generator=g, dtype=torch.int64).to(dtype)


def reference(parts: list[torch.Tensor], op: str) -> torch.Tensor:
    if parts[0].dtype == torch.bool:
        fn = {"SUM": torch.logical_or, "MAX": torch.logical_or}.get(op, torch.logical_and)
        return functools.reduce(fn, parts)
    fn = {"SUM": torch.add, "AVG": torch.add, "MIN": torch.minimum, "MAX": torch.maximum}.get(
        op, torch.mul
    )
    out = functools.reduce(fn, parts)
    return out / len(parts) if op == "AVG" else out


def valid(dtype: torch.dtype, op: str) -> bool:
    if op == "AVG":
        return dtype.is_floating_point
    return True


def assert_matches(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    if got.dtype.is_floating_point:
        tol = {torch.bfloat16: 2e-2, torch.float16: 2e-3}.get(got.dtype, 1e-5)
        torch.testing.assert_close(got, want, rtol=tol, atol=tol, msg=what)
    else:
        assert torch.equal(got, want), f"{what}: {got.tolist()[:16]} != {want.tolist()[:16]}"


def digest(t: torch.Tensor) -> str:
    return hashlib.sha1(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()[:16]


def check_collectives(rank: int, size: int) -> dict[str, Any]:
    """Every collective x dtype x op against the local reference."""
    digests: list[str] = []
    seed = 0
    for dtype in DTYPES:
        for op in OPS:
            if not valid(dtype, op):
                continue
            for n in SIZES:
                seed += 1
                parts = [make(r, n, dtype, seed) for r in range(size)]
                t = parts[rank].clone()
                dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
                assert_matches(t, reference(parts, op), f"all_reduce {dtype} {op} n={n}")
                digests.append(digest(t))
    for dtype in DTYPES:
        for n in (0, 1, 7, 3000):
            seed += 1
            parts = [make(r, n, dtype, seed) for r in range(size)]
            _gather_family(rank, size, parts, f"{dtype} n={n}")
            _reduce_family(rank, size, dtype, n, seed)
            _all_to_all(rank, size, dtype, n, seed)
    _uneven_all_gather(rank, size)
    _coalesced_and_async(rank, size)
    _point_to_point(rank, size)
    dist.barrier()
    return {"digests": digests}


def _gather_family(rank: int, size: int, parts: list[torch.Tensor], what: str) -> None:
    mine = parts[rank]
    outs = [torch.empty_like(mine) for _ in range(size)]
    dist.all_gather(outs, mine)
    for j in range(size):
        assert_matches(outs[j], parts[j], f"all_gather {what} from {j}")
    flat = torch.empty(size * mine.numel(), dtype=mine.dtype)
    dist.all_gather_into_tensor(flat, mine)
    assert_matches(flat, torch.cat(parts), f"all_gather_into_tensor {what}")
    for root in range(size):
        b = mine.clone()
        dist.broadcast(b, src=root)
        assert_matches(b, parts[root], f"broadcast {what} root={root}")
    root = size - 1
    gathered = [torch.empty_like(mine) for _ in range(size)] if rank == root else None
    dist.gather(mine, gathered, dst=root)
    if gathered is not None:
        for j in range(size):
            assert_matches(gathered[j], parts[j], f"gather {what} from {j}")
    got = torch.empty_like(mine)
    dist.scatter(got, [p.clone() for p in parts] if rank == 0 else None, src=0)
    assert_matches(got, parts[rank], f"scatter {what}")


def _reduce_family(rank: int, size: int, dtype: torch.dtype, n: int, seed: int) -> None:
    for op in OPS:
        if not valid(dtype, op):
            continue
        # rank r contributes the blocks inputs[r][0..size-1]
        inputs = [[make(r * size + j, n, dtype, seed) for j in range(size)] for r in range(size)]
        want = reference([inputs[r][rank] for r in range(size)], op)
        red = getattr(dist.ReduceOp, op)
        out = torch.empty(n, dtype=dtype)
        dist.reduce_scatter(out, [x.clone() for x in inputs[rank]], op=red)
        assert_matches(out, want, f"reduce_scatter {dtype} {op} n={n}")
        out = torch.empty(n, dtype=dtype)
        dist.reduce_scatter_tensor(out, torch.cat(inputs[rank]), op=red)
        assert_matches(out, want, f"reduce_scatter_tensor {dtype} {op} n={n}")
        root = 1 % size
        t = inputs[rank][0].clone()
        dist.reduce(t, dst=root, op=red)
        if rank == root:
            want0 = reference([inputs[r][0] for r in range(size)], op)
            assert_matches(t, want0, f"reduce {dtype} {op} n={n}")
        else:
            assert_matches(t, inputs[rank][0], f"reduce leaves non-root {dtype} {op}")


def _all_to_all(rank: int, size: int, dtype: torch.dtype, n: int, seed: int) -> None:
    # equal splits: block j of rank r is make(r*size + j)
    blocks = [[make(r * size + j, n, dtype, seed) for j in range(size)] for r in range(size)]
    out = torch.empty(size * n, dtype=dtype)
    dist.all_to_all_single(out, torch.cat(blocks[rank]))
    assert_matches(out, torch.cat([blocks[j][rank] for j in range(size)]), f"a2a {dtype} n={n}")
    outs = [torch.empty(n, dtype=dtype) for _ in range(size)]
    dist.all_to_all(outs, [b.clone() for b in blocks[rank]])
    for j in range(size):
        assert_matches(outs[j], blocks[j][rank], f"all_to_all list {dtype} n={n}")
    # uneven splits: rank r sends (r + j + n) % 3 rows of 2 columns to rank j
    rows = [[(r + j + n) % 3 for j in range(size)] for r in range(size)]
    send = [make(100 + rank * size + j, rows[rank][j] * 2, dtype, seed) for j in range(size)]
    recv_rows = [rows[j][rank] for j in range(size)]
    out = torch.empty(sum(recv_rows), 2, dtype=dtype)
    dist.all_to_all_single(
        out,
        torch.cat(send).view(-1, 2),
        output_split_sizes=recv_rows,
        input_split_sizes=rows[rank],
    )
    want = torch.cat(
        [make(100 + j * size + rank, rows[j][rank] * 2, dtype, seed) for j in range(size)]
    )
    assert_matches(out.view(-1), want, f"uneven all_to_all_single {dtype} n={n}")


def _uneven_all_gather(rank: int, size: int) -> None:
    parts = [torch.arange(r + 1, dtype=torch.float32) + 10 * r for r in range(size)]
    outs = [torch.empty(r + 1) for r in range(size)]
    dist.all_gather(outs, parts[rank])
    for j in range(size):
        assert_matches(outs[j], parts[j], f"uneven all_gather from {j}")
    objs: list[Any] = [None] * size
    dist.all_gather_object(objs, {"rank": rank, "pad": "x" * rank * 100})
    assert [o["rank"] for o in objs] == list(range(size))


def _coalesced_and_async(rank: int, size: int) -> None:
    pg = dist.group.WORLD
    # async work whose future chains, as DDP comm hooks do
    t = torch.full((10,), float(rank + 1))
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future().then(lambda f: f.value()[0] * 2)
    total = float(sum(range(1, size + 1)))
    assert torch.equal(fut.wait(), torch.full((10,), 2 * total))
    assert work.is_completed()
    # coalesced variants DDP/FSDP and functional collectives reach through C++
    ts = [torch.full((3,), float(rank)), torch.full((5,), 2.0 * rank)]
    pg.allreduce_coalesced(ts, dist.AllreduceCoalescedOptions()).wait()
    s = float(sum(range(size)))
    assert torch.equal(ts[0], torch.full((3,), s)) and torch.equal(ts[1], torch.full((5,), 2 * s))
    from tenter.comm.compat import AllgatherOptions

    ins = [torch.full((2,), float(rank)), torch.full((3,), float(rank))]
    outs = [torch.empty(2 * size), torch.empty(3 * size)]
    for name in ("all_gather_single_coalesced", "allgather_into_tensor_coalesced"):
        getattr(pg, name)(outs, ins, AllgatherOptions()).wait()
        assert torch.equal(outs[1], torch.arange(size).float().repeat_interleave(3)), name
    for name in ("_allgather_base", "all_gather_single"):
        out = torch.empty(2 * size)
        getattr(pg, name)(out, ins[0], AllgatherOptions()).wait()
        assert torch.equal(out, torch.arange(size).float().repeat_interleave(2)), name
    rs_out = [torch.empty(2)]
    rs_in = [torch.ones(2 * size) * (rank + 1)]
    for name in ("reduce_scatter_single_coalesced", "reduce_scatter_tensor_coalesced"):
        getattr(pg, name)(rs_out, rs_in, dist.ReduceScatterOptions()).wait()
        assert torch.equal(rs_out[0], torch.full((2,), total)), name
    import torch.distributed._functional_collectives as funcol

    r = funcol.all_reduce(torch.full((4,), float(rank)), "sum", pg)
    assert torch.equal(r, torch.full((4,), s))
    g = funcol.all_gather_tensor(torch.full((2,), float(rank)), 0, pg)
    assert torch.equal(g, torch.arange(size).float().repeat_interleave(2))
    rs = funcol.reduce_scatter_tensor(torch.ones(2 * size), "sum", 0, pg)
    assert torch.equal(rs, torch.full((2,), float(size)))
    # a non-contiguous tensor is reduced in place too
    m = torch.full((4, 6), float(rank + 1))[:, ::2]
    dist.all_reduce(m)
    assert torch.equal(m, torch.full((4, 3), total))


def _point_to_point(rank: int, size: int) -> None:
    if rank == 0:
        dist.send(torch.arange(5.0), dst=size - 1)
    elif rank == size - 1:
        t = torch.empty(5)
        dist.recv(t, src=0)
        assert torch.equal(t, torch.arange(5.0))
    ops = [
        dist.P2POp(dist.isend, torch.full((3,), float(rank)), (rank + 1) % size),
        dist.P2POp(dist.irecv, got := torch.empty(3), (rank - 1) % size),
    ]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert torch.equal(got, torch.full((3,), float((rank - 1) % size)))


def check_subgroups(rank: int, size: int) -> bool:
    """new_group and DeviceMesh dimensions (4 ranks)."""
    from torch.distributed.device_mesh import init_device_mesh

    evens, odds = dist.new_group([0, 2]), dist.new_group([1, 3])
    mine = evens if rank % 2 == 0 else odds
    t = torch.tensor([float(rank)])
    dist.all_reduce(t, group=mine)
    assert t.item() == (2.0 if rank % 2 == 0 else 4.0), t
    outs = [torch.empty(1) for _ in range(2)]
    dist.all_gather(outs, torch.tensor([float(rank)]), group=mine)
    assert [o.item() for o in outs] == [float(rank % 2), float(rank % 2 + 2)]
    b = torch.tensor([float(rank)])
    dist.broadcast(b, src=3, group=odds) if rank % 2 else dist.broadcast(b, src=2, group=evens)
    assert b.item() == (3.0 if rank % 2 else 2.0)
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    for dim, expect in (("dp", {0: 2, 1: 4, 2: 2, 3: 4}), ("tp", {0: 1, 1: 1, 2: 5, 3: 5})):
        t = torch.tensor([float(rank)])
        dist.all_reduce(t, group=mesh.get_group(dim))
        assert t.item() == expect[rank], (dim, t)
    dist.barrier()
    return True


class _Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = torch.nn.Linear(16, 64)
        self.l2 = torch.nn.Linear(64, 64)
        self.l3 = torch.nn.Linear(64, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.l3(torch.relu(self.l2(torch.relu(self.l1(x)))))


def train(rank: int, size: int, wrappers: list[str]) -> dict[str, dict[str, list[float]]]:
    """A few SGD steps of a small MLP under each of DDP and FSDP2; the final parameters
    (as lists, which the test compares across ranks with ``==``)."""
    return {wrapper: _train(rank, wrapper) for wrapper in wrappers}


def _train(rank: int, wrapper: str) -> dict[str, list[float]]:
    from torch.nn.parallel import DistributedDataParallel

    torch.manual_seed(0)
    net = _Net()
    if wrapper == "ddp":
        # small buckets: several all_reduces per step, overlapping backward
        model: torch.nn.Module = DistributedDataParallel(net, bucket_cap_mb=0.01)
    else:
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:  # torch < 2.6 keeps FSDP2 here
            from torch.distributed._composable.fsdp import fully_shard

        fully_shard(net.l1)
        fully_shard(net.l2)
        model = fully_shard(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    for _ in range(5):
        x = torch.randn(8, 16, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    if wrapper == "ddp":
        return {k: v.flatten().tolist() for k, v in net.state_dict().items()}
    return {k: v.full_tensor().flatten().tolist() for k, v in net.state_dict().items()}


def topology_and_hierarchical(rank: int, size: int) -> dict[str, Any]:
    """2 simulated hosts x 2 ranks: the host-leader path and its results."""
    pg = dist.group.WORLD
    topo = pg.topology
    assert topo.num_hosts == 2 and len(topo.local_ranks) == 2, topo
    route = pg._cpu  # the several-hosts route, with a gloo group of leaders on leaders only
    assert type(route).__name__ == "HostsCollectives", route
    assert route._leaders is not None if topo.is_leader else route._leaders is None
    digests = []
    seed = 5000
    for dtype in (torch.float32, torch.bfloat16, torch.int32, torch.uint8, torch.bool):
        for op in OPS:
            if not valid(dtype, op):
                continue
            for n in (0, 1, 1000, 5000):
                seed += 1
                parts = [make(r, n, dtype, seed) for r in range(size)]
                t = parts[rank].clone()
                dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
                assert_matches(t, reference(parts, op), f"hier all_reduce {dtype} {op} n={n}")
                digests.append(digest(t))
    parts = [make(r, 10, torch.float32, 1) for r in range(size)]
    _gather_family(rank, size, parts, "hier")
    _reduce_family(rank, size, torch.int64, 9, 2)
    _all_to_all(rank, size, torch.float32, 5, 3)
    dist.barrier()
    return {"digests": digests, "hosts": [list(h) for h in topo.hosts]}


def time_out(rank: int, size: int) -> str:
    """Rank 1 skips a collective; rank 0 must time out naming it and rank 1."""
    store = side_store()
    if rank == 0:
        try:
            dist.all_reduce(torch.ones(4))
        except Exception as e:
            store.set("timed_out", "1")
            return f"{type(e).__name__}: {e}"
        store.set("timed_out", "1")
        return "no error"
    store.wait(["timed_out"])
    return "waited"


def mismatch(rank: int, size: int, kind: str) -> str:
    try:
        if kind == "op":
            if rank == 0:
                dist.all_reduce(torch.ones(4))
            else:
                dist.all_gather_into_tensor(torch.empty(8), torch.ones(4))
        else:
            dist.all_reduce(torch.ones(4 + rank))
    except Exception as e:
        # the group is unusable now; a later collective says so instead of hanging
        try:
            dist.all_reduce(torch.ones(1))
        except Exception as later:
            return f"{type(e).__name__}: {e}\nLATER {type(later).__name__}: {later}"
        return f"{type(e).__name__}: {e}\nLATER no error"
    return "no error"


def raise_after_collective(rank: int, size: int) -> None:
    t = torch.ones(1000)
    dist.all_reduce(t)
    if rank == 1:
        raise RuntimeError("boom")
    dist.barrier()


def killed_peer(rank: int, size: int) -> str:
    """Rank 1 SIGKILLs itself while rank 0 waits in a collective."""
    dist.all_reduce(torch.ones(10))
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(10))
    except Exception as e:
        return f"{type(e).__name__} after {time.monotonic() - start:.1f}s: {e}"
    return "no error"


def all_reduce_once(rank: int, size: int) -> str:
    dist.all_reduce(torch.ones(100_000))
    return "ok"


def interrupted(rank: int, size: int) -> str:
    """Rank 1 gets SIGINT (Ctrl-C) while blocked in a collective, as a terminal sends it.

    Rank 0 stays until rank 1 has said how its collective ended: a rank 0 that exited first
    would end the collective itself ("rank 0 exited while this rank waited")."""
    dist.all_reduce(torch.ones(10))
    store = side_store()
    if rank == 1:
        # As a worker of tenter or torchrun starts; a test run started in the background
        # (as CI is) would otherwise hand the ranks SIGINT ignored.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        store.set("rank1_pid", str(os.getpid()))
        outcome = "no interrupt"
        try:
            dist.all_reduce(torch.ones(10))  # rank 0 never joins
        except KeyboardInterrupt:
            outcome = "interrupted"
        finally:
            store.set("rank1_outcome", outcome)
        return outcome
    # Rank 1 is blocked once its barrier flag moves past rank 0's: watch it in the segment.
    channel = dist.group.WORLD._shm.ch
    flag = channel._arrive[1]
    while channel._ctl32[flag] == channel._count:
        os.sched_yield()
    store.set("rank1_blocked", "1")
    store.wait(["rank1_outcome"])
    return "ok"


def fenced_group(rank: int, size: int) -> dict[str, Any]:
    """Groups created as if on other machines: an unknown architecture must be refused,
    aarch64 must get libatomic's fences, and its collectives must run through them."""
    real_machine = platform.machine
    try:
        platform.machine = lambda: "riscv64"
        try:
            dist.new_group(backend="tenter")
            refused = "not refused"
        except Exception as e:
            refused = f"{type(e).__name__}: {e}"
        platform.machine = lambda: "aarch64"
        group = dist.new_group(backend="tenter")
    finally:
        platform.machine = real_machine
    digests, checked = [], 0
    for n in (1, 1000, 5000):  # the latency path, the general one, several rounds
        parts = [make(r, n, torch.float32, n) for r in range(size)]
        t = parts[rank].clone()
        dist.all_reduce(t, group=group)
        assert_matches(t, reference(parts, "SUM"), f"fenced all_reduce n={n}")
        digests.append(digest(t))
        outs = [torch.empty_like(t) for _ in range(size)]
        dist.all_gather(outs, parts[rank], group=group)
        for j in range(size):
            assert_matches(outs[j], parts[j], f"fenced all_gather n={n} from {j}")
        checked += 2
    fences = group._shm.ch.fences.source
    dist.destroy_process_group(group)
    return {"refused": refused, "fences": fences, "checked": checked, "digests": digests}
