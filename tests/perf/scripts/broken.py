"""``python -m tenter.perf`` with a test double: an all_reduce that corrupts one element on
every rank but 0, to show the harness reports it (per rank, as nccl-tests counts) and exits
non-zero."""

from __future__ import annotations

import dataclasses
import sys

from tenter.perf.collectives import ALL_REDUCE, COLLECTIVES, Call
from tenter.perf.worker import main


def corrupting_all_reduce(call: Call) -> None:
    ALL_REDUCE.run(call)
    if call.rank > 0 and call.recv.numel():
        call.recv[0] += 1


broken = {**COLLECTIVES, "all_reduce": dataclasses.replace(ALL_REDUCE, run=corrupting_all_reduce)}
sys.exit(main(sys.argv[1:], collectives=broken))
