"""A host-wide readers-writer lock over two files in one folder, with writer preference.

- a reader passes the *gate* (exclusive, held for an instant) and then holds *busy* shared, so readers
  run side by side;
- a writer takes the gate (no new reader starts) and then *busy* exclusive (it waits for the readers in
  flight to finish), and holds both until it leaves.

flock(2) locks belong to an open file description: every `with` opens its own descriptors, so threads of
one process exclude each other like processes do, and a process that dies releases its locks with its
descriptors. A wait may be bounded (`wait_s`): the context then says whether the lock was taken, and the
caller goes on either way (a lock that only avoids contention must never become a failure of its own).
Used by kernelfoundry.stack.quiet_host (builds and CPU timing) and kernelfoundry.stack.device_lease (a
GPU's evaluations and the task validations beside them).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

POLL_S = 0.02  # how often a bounded wait tries again


class HostLock:
    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)

    @contextlib.contextmanager
    def shared(self, wait_s: float | None = None) -> Iterator[bool]:
        """Held by a reader: waits while a writer holds or waits for the lock (up to `wait_s`)."""
        deadline = None if wait_s is None else time.monotonic() + wait_s
        busy = self._open("busy")
        try:
            gate = self._open("gate")
            try:
                taken = _lock(gate, fcntl.LOCK_EX, deadline) and _lock(busy, fcntl.LOCK_SH, deadline)
            finally:
                os.close(gate)
            yield taken
        finally:
            os.close(busy)

    @contextlib.contextmanager
    def exclusive(self, wait_s: float | None = None) -> Iterator[bool]:
        """Held by a writer: no new reader starts, and the readers in flight finish first (up to
        `wait_s`; on a timeout neither file stays locked, so readers go on)."""
        deadline = None if wait_s is None else time.monotonic() + wait_s
        gate, busy = self._open("gate"), self._open("busy")
        try:
            taken = _lock(gate, fcntl.LOCK_EX, deadline)
            if taken and not _lock(busy, fcntl.LOCK_EX, deadline):
                fcntl.flock(gate, fcntl.LOCK_UN)
                taken = False
            yield taken
        finally:
            os.close(busy)
            os.close(gate)

    def _open(self, name: str) -> int:
        self.folder.mkdir(parents=True, exist_ok=True)
        return os.open(self.folder / f"{name}.lock", os.O_RDWR | os.O_CREAT, 0o644)


def _lock(fd: int, mode: int, deadline: float | None) -> bool:
    """flock `fd` in `mode`, blocking until `deadline` (None: for as long as it takes)."""
    if deadline is None:
        fcntl.flock(fd, mode)
        return True
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_S)
