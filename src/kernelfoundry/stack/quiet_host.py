"""Quiet timing on a shared host: builds step aside while a CPU evaluation times its runs.

On one machine (the embedded stack, a developer's laptop, a CI runner) the compiler's g++ / nvcc builds
and the CPU executor's timed runs share the cores; a build that starts during a timed run makes the
candidate look slower than it is, and the search then ranks kernels by the noise. `QuietHost` is a
host-wide readers-writer lock (kernelfoundry.stack.host_lock, writer preference): builds are its readers
and run side by side; timing is its writer, so no build starts and the builds in flight finish first.
An empty folder turns the lock off (separate machines, GPU executors).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from kernelfoundry.stack.host_lock import HostLock


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
        with HostLock(self.folder).shared():
            yield

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        """Held around timed runs: no build starts, and the builds in flight finish first."""
        if self.folder is None:
            yield
            return
        with HostLock(self.folder).exclusive():
            yield
