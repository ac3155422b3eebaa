"""Quiet timing on a shared host or device: other work steps aside while an evaluation times its runs.

On one machine (the embedded stack, a developer's laptop, a CI runner) the compiler's g++ / nvcc builds
and the CPU executor's timed runs share the cores; a build that starts during a timed run makes the
candidate look slower than it is, and the search then ranks kernels by the noise. On one GPU, an
executor that runs several evaluations at once (`executor_slots`) lets their trials overlap while their
timed runs take turns. `QuietHost` is a readers-writer lock over a folder (kernelfoundry.stack.host_lock,
writer preference): builds and evaluations' trials are its readers and run side by side; timing is its
writer, so no reader starts and the readers in flight finish first. An empty folder turns the lock off
(separate machines, a GPU executor of one slot).
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
    def sharing(self, wait_s: float | None = None) -> Iterator[bool | None]:
        """Held around work that may run beside other such work but never beside timed runs (a build, an
        evaluation's trials): waits while a timed run holds the lock. Yields True held, False not taken
        within `wait_s` (the work goes on without it), None no lock."""
        if self.folder is None:
            yield None
            return
        with HostLock(self.folder).shared(wait_s) as taken:
            yield taken

    @contextlib.contextmanager
    def timing(self, wait_s: float | None = None) -> Iterator[bool | None]:
        """Held around timed runs: no shared work starts, and the shared work in flight finishes first.
        Yields True held, False not taken within `wait_s` (the runs go on without it), None no lock."""
        if self.folder is None:
            yield None
            return
        with HostLock(self.folder).exclusive(wait_s) as taken:
            yield taken
