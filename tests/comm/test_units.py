"""The pieces of tenter.comm that need no second process."""

from __future__ import annotations

import os
import re
import stat

import pytest
import torch
import torch.distributed as dist

from tenter.comm.algorithms import _portion, reduce_into
from tenter.comm.descriptors import Reduction
from tenter.comm.setup import env_bytes
from tenter.comm.shm import SHM_DIR, Segment, layout, segment_name
from tenter.comm.tensors import reduction
from tenter.comm.topology import Topology, host_key


def test_topology_orders_hosts_by_lowest_rank() -> None:
    topo = Topology.from_keys(3, ["b", "a", "b", "a", "c"])
    assert topo.hosts == ((0, 2), (1, 3), (4,))
    assert (topo.host_index, topo.local_index, topo.is_leader) == (1, 1, False)
    assert topo.leaders == (0, 1, 4)


def test_host_key_uses_tenter_host_if_launcher_set_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENTER_HOST", "algo-2")
    monkeypatch.setenv("TENTER_HOST_ADDR", "127.101.0.1")
    assert host_key() == "tenter:algo-2@127.101.0.1"
    monkeypatch.delenv("TENTER_HOST")
    monkeypatch.delenv("TENTER_HOST_ADDR")
    monkeypatch.delenv("TENTER_COMM_HOST_KEY", raising=False)
    assert host_key().startswith(f"host:{os.uname().nodename}/")


@pytest.mark.parametrize(("count", "parts"), [(0, 2), (1, 4), (13, 2), (1000, 4), (33, 3)])
def test_portions_tile_the_range_if_split(count: int, parts: int) -> None:
    ranges = [_portion(count, parts, i) for i in range(parts)]
    covered = [i for lo, hi in ranges for i in range(lo, hi)]
    assert covered == list(range(count))
    assert all(lo % 16 == 0 or lo == count for lo, _ in ranges)


def test_segment_is_private_and_gone_after_unlink() -> None:
    old = os.umask(0)
    try:
        seg = Segment.create(segment_name("unit test/x"), 8192)
    finally:
        os.umask(old)
    try:
        assert re.fullmatch(r"tenter-unit_test_x-\d+-[0-9a-f]{12}", seg.name)
        assert stat.S_IMODE(os.stat(seg.path).st_mode) == 0o600
        seg.mm[:4] = b"abcd"
        other = Segment.attach(seg.name, 8192)
        assert other.mm[:4] == b"abcd"
    finally:
        seg.unlink()
    assert not os.path.exists(os.path.join(SHM_DIR, seg.name))
    seg.unlink()  # twice is fine: every rank unlinks


def test_layout_is_page_aligned() -> None:
    control, total = layout(4, 1 << 20)
    assert control % 4096 == 0 and total == control + 2 * 5 * (1 << 20)


def test_avg_raises_if_dtype_is_integer() -> None:
    with pytest.raises(ValueError, match=r"^ReduceOp.AVG needs a floating dtype, got torch.int32"):
        reduction(dist.ReduceOp.AVG, torch.int32)
    assert reduction(dist.ReduceOp.AVG, torch.bfloat16) == (Reduction.SUM, True)


def test_bitwise_op_raises_if_dtype_is_floating() -> None:
    with pytest.raises(ValueError, match=r"^ReduceOp.BAND needs an integer or bool dtype"):
        reduction(dist.ReduceOp.BAND, torch.float32)


def test_bool_sum_is_or_and_product_is_and() -> None:
    stack = torch.tensor([[True, False, False], [True, True, False]])
    out = torch.empty(3, dtype=torch.bool)
    reduce_into(stack, out, Reduction.SUM)
    assert out.tolist() == [True, True, False]
    reduce_into(stack, out, Reduction.PRODUCT)
    assert out.tolist() == [True, False, False]


def test_bitwise_reductions_fold_in_rank_order() -> None:
    stack = torch.tensor([[0b1100], [0b1010], [0b0110]], dtype=torch.int32)
    out = torch.empty(1, dtype=torch.int32)
    reduce_into(stack, out, Reduction.BXOR)
    assert out.item() == 0b0000
    reduce_into(stack, out, Reduction.BOR)
    assert out.item() == 0b1110


def test_env_bytes_raises_if_not_an_integer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENTER_COMM_CHUNK_BYTES", "1M")
    with pytest.raises(ValueError, match=r"^TENTER_COMM_CHUNK_BYTES='1M' is not a byte count"):
        env_bytes("TENTER_COMM_CHUNK_BYTES", 1, 4096)
    monkeypatch.setenv("TENTER_COMM_CHUNK_BYTES", "100")
    with pytest.raises(ValueError, match=r"is below the minimum of 4096 bytes"):
        env_bytes("TENTER_COMM_CHUNK_BYTES", 1, 4096)
