"""Crash-safe files: durable writes, the commit of a checkpoint directory, the manifest.

A checkpoint directory holds one folder per complete checkpoint and ``manifest.json``::

    <dir>/manifest.json          {"format": 1, "latest": "step-00000100", "checkpoints": [...]}
    <dir>/step-00000050/         complete checkpoints, oldest first, at most `keep`
    <dir>/step-00000100/
    <dir>/.tmp-step-00000150/    a save in progress (or one that crashed)

The manifest is the only source of truth: a folder it does not list is not a checkpoint.
A save writes everything under the ``.tmp-`` name and fsyncs it, renames the folder, and only
then replaces the manifest (itself written to a temporary name, fsynced and renamed). A crash
at any point therefore leaves the previous manifest, which names only complete folders; the
leftovers (a ``.tmp-`` folder, a renamed folder the manifest never got to list, a pruned
folder not yet deleted) are removed by :func:`remove_stale` when the next job starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from tenter.checkpoint.errors import CheckpointError

MANIFEST = "manifest.json"
DIGESTS = "digests.json"
"""In each checkpoint folder: every file's size and CRC-32 as written, to tell a damaged
checkpoint (a truncated file, a changed byte) before loading it."""
FORMAT = 1
TMP_PREFIX = ".tmp-"

crash_hook: Callable[[str], None] | None = None
"""Called at each named point of the commit protocol: ``"written"`` (the temporary folder is
complete and durable, not yet renamed), ``"renamed"`` (renamed, the manifest not yet
replaced) and ``"manifest"`` (the new manifest written to its temporary name, not yet
renamed). The crash tests set it to SIGKILL the saver at one of these points."""


def _reached(point: str) -> None:
    if crash_hook is not None:
        crash_hook(point)


def checkpoint_name(step: int) -> str:
    """The folder of the checkpoint of ``step``; zero-padded so that names sort by step."""
    return f"step-{step:08d}"


def fsync_path(path: Path) -> None:
    """Make ``path`` durable: a file's content, or a directory's entries (new or renamed
    files in it survive a power loss only once the directory itself is fsynced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_durable(obj: object, path: Path) -> None:
    """``torch.save`` to ``path`` and fsync it. The caller renames its folder afterwards,
    so the file needs no temporary name of its own."""
    try:
        with path.open("wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        if e.filename is not None:
            raise
        raise OSError(e.errno, e.strerror, str(path)) from e  # a write's error names no file


def write_text_atomic(path: Path, text: str, point: str | None = None) -> None:
    """Replace ``path`` with ``text`` so that a reader sees the old or the new content,
    never a mix, even after a crash: temporary name, fsync, rename, fsync the folder."""
    tmp = path.with_name(f"{TMP_PREFIX}{path.name}.{os.getpid()}")
    try:
        with tmp.open("w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk: what was written of it is of no use
        raise
    if point is not None:
        _reached(point)
    os.replace(tmp, path)
    fsync_path(path.parent)


def check_writable(root: Path) -> None:
    """Create ``root`` if needed and prove that files can be written and fsynced there."""
    # Its own prefix, so that rank 0's remove_stale() never deletes another rank's probe.
    probe = root / f".probe-{socket.gethostname()}-{os.getpid()}"
    try:
        root.mkdir(parents=True, exist_ok=True)
        with probe.open("wb") as f:
            f.write(b"ok")
            os.fsync(f.fileno())
        probe.unlink()
    except OSError as e:
        with contextlib.suppress(OSError):  # a full disk: the probe created, its write refused
            probe.unlink(missing_ok=True)
        raise CheckpointError(
            f"the checkpoint directory {root} is not writable ({e.strerror or e}); "
            "pass Checkpointer(dir=...) a writable directory that every host can reach"
        ) from e


@dataclass(frozen=True)
class Entry:
    """One complete checkpoint, as the manifest lists it."""

    name: str
    step: int
    world_size: int
    sharded: bool
    """Saved through torch.distributed.checkpoint, one shard per rank (else from rank 0)."""


@dataclass
class Manifest:
    checkpoints: list[Entry] = field(default_factory=list)
    """The complete checkpoints, oldest first."""

    @property
    def latest(self) -> Entry | None:
        return self.checkpoints[-1] if self.checkpoints else None

    def to_json(self) -> str:
        latest = self.latest
        return json.dumps(
            {
                "format": FORMAT,
                "latest": latest.name if latest else None,
                "checkpoints": [asdict(e) for e in self.checkpoints],
            },
            indent=2,
        )


def read_manifest(root: Path) -> Manifest:
    """The manifest of ``root``; empty when there is none yet (a fresh start)."""
    path = root / MANIFEST
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError:
        return Manifest()
    except (OSError, ValueError) as e:
        raise CheckpointError(f"cannot read the checkpoint manifest {path}: {e}") from e
    if data.get("format") != FORMAT:
        raise CheckpointError(
            f"the checkpoint manifest {path} has format {data.get('format')!r}; this version "
            f"of tenter reads format {FORMAT}"
        )
    return Manifest([Entry(**e) for e in data["checkpoints"]])


def commit(root: Path, tmp: Path, entry: Entry, keep: int) -> Manifest:
    """Publish the finished temporary folder ``tmp`` as checkpoint ``entry`` and drop all
    but the newest ``keep`` checkpoints. Runs on one rank, after every rank's files in
    ``tmp`` are durable."""
    write_text_atomic(tmp / DIGESTS, json.dumps(file_digests(tmp)))
    for folder in [tmp, *(p for p in tmp.rglob("*") if p.is_dir())]:
        fsync_path(folder)
    _reached("written")
    manifest = read_manifest(root)
    others = [e for e in manifest.checkpoints if e.name != entry.name]
    final = root / entry.name
    if final.exists():
        if len(others) < len(manifest.checkpoints):
            # A listed checkpoint of the same step, from a run that started over without
            # resume(): unlisted first, so that the manifest never names a half-deleted folder.
            write_text_atomic(root / MANIFEST, Manifest(others).to_json())
        # Else renamed by a save that crashed before its manifest, so not a checkpoint.
        # Either way rename() cannot replace a non-empty folder.
        shutil.rmtree(final)
    os.rename(tmp, final)
    fsync_path(root)
    _reached("renamed")
    entries = [*others, entry]
    kept, dropped = entries[-keep:], entries[:-keep]
    manifest = Manifest(kept)
    write_text_atomic(root / MANIFEST, manifest.to_json(), point="manifest")
    # Deleted only now that the manifest no longer lists them.
    for old in dropped:
        shutil.rmtree(root / old.name, ignore_errors=True)
    return manifest


def file_digests(folder: Path) -> dict[str, list[int]]:
    """Each file's size and CRC-32 under ``folder``, by its path there (the digests' own
    file left out)."""
    out = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != DIGESTS):
        crc, size = 0, 0
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                crc, size = zlib.crc32(chunk, crc), size + len(chunk)
        out[str(path.relative_to(folder))] = [size, crc]
    return out


def damage(folder: Path) -> str | None:
    """What is wrong with the checkpoint in ``folder`` against its digests; None where
    nothing is (or it has no digests: saved by an earlier tenter)."""
    try:
        written = json.loads((folder / DIGESTS).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        return f"its {DIGESTS} cannot be read: {e}"
    found = file_digests(folder)
    for name, (size, crc) in written.items():
        if name not in found:
            return f"{name} is missing"
        if found[name][0] != size:
            state = "truncated" if found[name][0] < size else "longer than written"
            return f"{name} is {state}: {found[name][0]} bytes of the {size} written"
        if found[name][1] != crc:
            return f"{name} differs from what was written (its CRC-32 changed)"
    return None


def newest_intact(root: Path) -> tuple[Entry | None, list[str]]:
    """The newest checkpoint of ``root`` that is not damaged, and why each newer one is."""
    skipped: list[str] = []
    for entry in reversed(read_manifest(root).checkpoints):
        why = damage(root / entry.name)
        if why is None:
            return entry, skipped
        skipped.append(f"checkpoint {root / entry.name} is damaged: {why}")
    return None, skipped


def remove_stale(root: Path) -> None:
    """Delete what crashed or interrupted saves left in ``root``: temporary folders and
    files, and checkpoint folders that the manifest does not list."""
    listed = {e.name for e in read_manifest(root).checkpoints}
    for path in root.iterdir():
        if path.name.startswith(TMP_PREFIX):
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        elif path.is_dir() and path.name.startswith("step-") and path.name not in listed:
            shutil.rmtree(path, ignore_errors=True)
