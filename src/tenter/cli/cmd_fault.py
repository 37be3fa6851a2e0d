"""``tenter fault JOB partition|heal|kill HOST`` or ``kill --rank N``: inject a fault into a
running local job.

    tenter run --isolation network --hosts 3 train.py --detach
    tenter fault JOB partition algo-2     # algo-2's network link goes down
    tenter fault JOB heal algo-2          # and back up: it rejoins at the next rendezvous
    tenter fault JOB kill algo-3          # its agent and workers SIGKILLed: a lost host
    tenter fault JOB kill --rank 1        # one worker SIGKILLed, as a crash: a restart

``partition`` and ``heal`` need a job with isolated hosts (``--isolation network``); ``kill``
works on any local job, and ``kill --rank`` on Slurm jobs too (their agents read the request
from the job directory the nodes share). The command returns once the fault was applied; the
job's console says how the job takes it.
"""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    from tenter.launch.launcher.isolation.faults import ACTIONS

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
    parser.add_argument(
        "host", metavar="HOST", nargs="?", help="a host of the job (algo-1, algo-2, ...)"
    )
    parser.add_argument(
        "--rank", type=int, metavar="N", help="kill: the worker of rank N only, not its host"
    )
    parser.set_defaults(func=fault)


def fault(args: argparse.Namespace) -> int:
    from tenter.errors import TenterError
    from tenter.launch.launcher.isolation.faults import kill_rank, request

    if args.rank is not None:
        if args.action != "kill" or args.host is not None:
            raise TenterError(
                "--rank", "goes with `kill` and no HOST", "tenter fault JOB kill --rank N"
            )
        print(kill_rank(args.job, args.rank))
        return 0
    if args.host is None:
        raise TenterError("HOST", f"{args.action} needs a host", "name one: algo-1, algo-2, ...")
    print(request(args.job, args.action, args.host))
    return 0
