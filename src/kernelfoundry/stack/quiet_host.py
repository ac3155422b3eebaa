"""Quiet timing on a shared host: builds step aside while a CPU evaluation times its runs.

On one machine (the embedded stack, a developer's laptop, a CI runner) the compiler's g++ / nvcc builds
and the CPU executor's timed runs share the cores; a build that starts during a timed run makes the
candidate look slower than it is, and the search then ranks kernels by the noise. `QuietHost` is a
host-wide readers-writer lock over two files in one folder, with writer preference:

- a build passes the *gate* (exclusive, held for an instant) and then holds *busy* shared while it runs,
  so builds run side by side;
- timing takes the gate (no new build starts) and then *busy* exclusive (it waits for the builds in
  flight to finish), times, and releases both.

flock(2) locks belong to an open file description: every `with` opens its own descriptors, so threads of
one process exclude each other like processes do, and a process that dies releases its locks with its
descriptors. An empty folder turns the lock off (separate machines, GPU executors).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


class QuietHost:
    def __init__(self, folder: str | Path | None) -> None:
        self.folder = Path(folder) if folder not in (None, "") else None

    @property
    def enabled(self) -> bool:
        return self.folder is not None

    @contextlib.contextmanager
    def building(self) -> Iterator[None]:
        """Held around one build: waits while a timed run holds the host, then lets the next build by."""
        if self.folder is None:
            yield
            return
        busy = self._open("busy")
        try:
            gate = self._open("gate")
            try:
                fcntl.flock(gate, fcntl.LOCK_EX)
                fcntl.flock(busy, fcntl.LOCK_SH)
            finally:
                os.close(gate)
            yield
        finally:
            os.close(busy)

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        """Held around timed runs: no build starts, and the builds in flight finish first."""
        if self.folder is None:
            yield
            return
        gate, busy = self._open("gate"), self._open("busy")
        try:
            fcntl.flock(gate, fcntl.LOCK_EX)
            fcntl.flock(busy, fcntl.LOCK_EX)
            yield
        finally:
            os.close(busy)
            os.close(gate)

    def _open(self, name: str) -> int:
        assert self.folder is not None
        self.folder.mkdir(parents=True, exist_ok=True)
        return os.open(self.folder / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)
