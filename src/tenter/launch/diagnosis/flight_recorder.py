"""Hang culprits from torch's flight recorder: which rank's collective sequence is behind or
mismatched, for collectives no Python code issued (DDP's reducer, FSDP2, NCCL work).

The ranks' recorders are on in jobs with a hang timeout (:mod:`tenter.runtime.flight_recorder`).
On a hang the launcher asks for them (:func:`request_dumps`: the file ``control/flight-recorder``)
and each rank writes ``<stem>.fr.pkl``: torch's dump, a pickle whose ``entries`` are the last
collectives of every process group, each with ``pg_id``, ``process_group`` (id, name),
``collective_seq_id``, ``profiling_name`` (``gloo:all_reduce``, ``nccl:all_reduce``),
``input_sizes`` and ``state``. :func:`culprits` compares them, per process group: a rank whose
last collective's sequence number is below the others' is behind (the others wait for it in the
next one); ranks that issued the same sequence number as different collectives or sizes are
mismatched. Read here rather than with torch's analyser (``torchfrtrace``, torch 2.13's
``torch.distributed.flight_recorder``), which is a command line that prints its findings for a
person and whose modules are not a public API; the fields read here are the dump's documented
format (``version`` 2.x).

The dumps are the job's own files, written by its ranks: as trusted as the training script.
"""

from __future__ import annotations

import pickle
import time
from collections import defaultdict
from typing import Any

from tenter.jobdir.control import FLIGHT_RECORDER_REQUEST, flight_recorder_dump, made_control_dir


def request_dumps(job_dir: str) -> float:
    """Ask every rank for its recorder; returns when (a dump older than that is stale)."""
    path = made_control_dir(job_dir) / FLIGHT_RECORDER_REQUEST
    path.write_text(f"{time.time()}\n")
    return path.stat().st_mtime


def read_dumps(stems: dict[int, str], since: float, dumps: dict[int, dict[str, Any]]) -> None:
    """One pass: the dumps written after ``since`` (by rank, from ``stems``) into ``dumps``."""
    for rank, stem in stems.items():
        path = flight_recorder_dump(stem)
        if rank in dumps or not path.exists() or path.stat().st_mtime < since:
            continue
        try:
            dumps[rank] = pickle.loads(path.read_bytes())
        except (OSError, pickle.UnpicklingError, EOFError):
            continue


def _describe(entry: dict[str, Any]) -> str:
    sizes = entry.get("input_sizes") or []
    return f"{entry.get('profiling_name', '?')} #{entry['collective_seq_id']} {sizes}"


def culprits(dumps: dict[int, dict[str, Any]], hosts: dict[int, str]) -> list[str]:
    """The report's lines: per process group, the ranks behind and the mismatched collectives
    (empty when the recorders agree or there is nothing to compare)."""
    by_group: dict[str, dict[int, dict[int, dict[str, Any]]]] = defaultdict(dict)
    for rank, dump in dumps.items():
        for entry in dump.get("entries", []):
            if entry.get("is_p2p") or not entry.get("collective_seq_id"):
                continue
            group = "/".join(str(x) for x in entry.get("process_group", (entry.get("pg_id"),)))
            by_group[group].setdefault(rank, {})[int(entry["collective_seq_id"])] = entry
    lines = []
    for group, ranks in sorted(by_group.items()):
        if len(ranks) < 2:
            continue
        last = {rank: max(seqs) for rank, seqs in ranks.items()}
        ahead = max(last.values())
        leader = next(r for r, s in last.items() if s == ahead)
        for rank in sorted(r for r, s in last.items() if s < ahead):
            mine = ranks[rank][last[rank]]
            lines.append(
                f"flight recorder: rank {rank} on {hosts.get(rank, '?')} is behind in process "
                f"group {group}: its last collective is {_describe(mine)}; rank {leader} and "
                f"others issued up to {_describe(ranks[leader][ahead])}: they wait for rank "
                f"{rank} in collective #{last[rank] + 1}"
            )
        common = set.intersection(*(set(seqs) for seqs in ranks.values()))
        for seq in sorted(common):
            kinds = {
                rank: (seqs[seq].get("profiling_name"), str(seqs[seq].get("input_sizes")))
                for rank, seqs in ranks.items()
            }
            if len(set(kinds.values())) > 1:
                what = ", ".join(f"rank {r} {_describe(ranks[r][seq])}" for r in sorted(kinds))
                lines.append(
                    f"flight recorder: collective #{seq} of process group {group} is "
                    f"mismatched: {what}"
                )
                break  # the first mismatch; those after it follow from it
    return lines
