"""The gloo all_reduce anchor: ``tenter perf all_reduce`` from 8 B to 64 MB with 2 and 4
ranks on this machine, then ``tenter perf compare`` of the two runs (table and plot).

    python benchmarks/perf_gloo_allreduce.py [--out benchmarks/results] [--maxbytes 64M]

Every later collective work (a new backend, a faster transport) is measured against these
tables. Writes ``<out>/gloo_all_reduce_{2,4}ranks.log`` (nccl-tests layout),
``<out>/gloo_all_reduce_compare.txt``, ``.json`` and ``.png``. Exits non-zero when a run
reports a wrong value or fails.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

RANKS = (2, 4)


def tenter(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tenter", *args], capture_output=True, text=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results"))
    parser.add_argument("--maxbytes", default="64M", help="largest size (default 64M)")
    parser.add_argument("--iters", default="20", help="timed iterations per size (default 20)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    logs = []
    for nranks in RANKS:
        log = args.out / f"gloo_all_reduce_{nranks}ranks.log"
        run = tenter(
            "perf", "all_reduce", "-b", "8", "-e", args.maxbytes, "-f", "2",
            "-n", args.iters, "-w", "5", "-c", "1",
            "--hosts", "1", "--procs-per-host", str(nranks), "--backend", "gloo",
        )  # fmt: skip
        log.write_text(run.stdout)
        print(run.stdout, end="")
        if run.returncode != 0:
            print(run.stderr, file=sys.stderr)
            return run.returncode
        logs.append(str(log))
    stem = args.out / "gloo_all_reduce_compare"
    compare = tenter(
        "perf", "compare", *logs, "--labels", ",".join(f"gloo {n} ranks" for n in RANKS),
        "--plot", f"{stem}.png", "--json", f"{stem}.json",
    )  # fmt: skip
    Path(f"{stem}.txt").write_text(compare.stdout)
    print(compare.stdout, end="", file=sys.stdout)
    return compare.returncode


if __name__ == "__main__":
    sys.exit(main())
