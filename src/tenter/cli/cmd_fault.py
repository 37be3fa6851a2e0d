"""``tenter fault JOB partition|heal|kill HOST``: inject a fault into a running local job.

    tenter run --isolation network --hosts 3 train.py --detach
    tenter fault JOB partition algo-2     # algo-2's network link goes down
    tenter fault JOB heal algo-2          # and back up: it rejoins at the next rendezvous
    tenter fault JOB kill algo-3          # its agent and workers SIGKILLed: a lost host

``partition`` and ``heal`` need a job with isolated hosts (``--isolation network``); ``kill``
works on any local job. The command returns once the job's launcher has applied the fault;
the job's console says how the job takes it.
"""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    from tenter.launch.isolation.faults import ACTIONS

    parser = sub.add_parser(
        "fault",
        help="partition, heal or kill a host of a running local job",
        description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("job", metavar="JOB", help="job id or job directory")
    parser.add_argument(
        "action",
        metavar="ACTION",
        choices=list(ACTIONS),
        help="; ".join(f"{name}: {what}" for name, what in ACTIONS.items()),
    )
    parser.add_argument("host", metavar="HOST", help="a host of the job (algo-1, algo-2, ...)")
    parser.set_defaults(func=fault)


def fault(args: argparse.Namespace) -> int:
    from tenter.launch.isolation.faults import request

    print(request(args.job, args.action, args.host))
    return 0
