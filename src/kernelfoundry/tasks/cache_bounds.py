"""A bounded cache folder: least recently used entries leave first once a count or a size is passed.

The validation cache (kernelfoundry.tasks.validation) keeps one small JSON file per task the server
validated, keyed by a hash of client text, so its folder would grow with every distinct task a client
sends. `touch` marks an entry used (its modification time), `prune` removes the least recently used
entries until at most `max_entries` files and `max_bytes` bytes are left, and temporary files that a
crashed writer left behind. Best effort throughout: a cache that cannot be trimmed or touched costs time,
never a request, and an entry another process removes is validated again.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MAX_ENTRIES = 1024
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
STALE_PARTIAL_S = 3600.0  # a writer's temporary file this old belongs to no live write


@dataclass(frozen=True)
class CacheBounds:
    max_entries: int = DEFAULT_MAX_ENTRIES
    max_bytes: int = DEFAULT_MAX_BYTES


DEFAULT_BOUNDS = CacheBounds()


@dataclass(frozen=True)
class _Entry:
    path: Path
    used: float
    size: int


def touch(path: Path) -> None:
    """Mark a cache entry as just used."""
    with contextlib.suppress(OSError):
        os.utime(path)


def _entries(folder: Path, suffix: str) -> list[_Entry]:
    found: list[_Entry] = []
    with contextlib.suppress(OSError), os.scandir(folder) as listing:
        for item in listing:
            if not item.name.endswith(suffix) or item.name.startswith("."):
                continue
            with contextlib.suppress(OSError):
                stat = item.stat(follow_symlinks=False)
                found.append(_Entry(Path(item.path), stat.st_mtime, stat.st_size))
    return found


def _remove_stale_partials(folder: Path, now: float) -> None:
    with contextlib.suppress(OSError), os.scandir(folder) as listing:
        for item in listing:
            if item.name.startswith(".") and item.name.endswith(".tmp"):
                with contextlib.suppress(OSError):
                    if now - item.stat(follow_symlinks=False).st_mtime > STALE_PARTIAL_S:
                        os.unlink(item.path)


def prune(folder: Path, bounds: CacheBounds, *, suffix: str = ".json", keep: Path | None = None) -> int:
    """Remove least recently used entries until `bounds` hold; `keep` (the entry just written) stays.

    Returns how many entries were removed.
    """
    _remove_stale_partials(folder, time.time())
    entries = sorted(_entries(folder, suffix), key=lambda e: e.used)
    count = len(entries)
    size = sum(e.size for e in entries)
    removed = 0
    for entry in entries:
        if count <= bounds.max_entries and size <= bounds.max_bytes:
            break
        if keep is not None and entry.path == keep:
            continue
        with contextlib.suppress(FileNotFoundError):
            entry.path.unlink()
        count -= 1
        size -= entry.size
        removed += 1
    return removed
