"""Task validations off the evolver's critical path: a bounded pool of threads with a bounded waiting line.

A submitted task's reference runs in a sandboxed child (kernelfoundry.tasks.validation) for as long as the
reference takes: seconds, sometimes minutes. The evolver's one event loop serves every run's progress,
every RPC and the event consumer, so a validation never runs on it, nor on the loop's default executor
(which other work shares): `ValidationPool.run` hands it to one of `workers` threads of its own; at most
`queue` more wait for a thread, and one more is refused at once with RESOURCE_EXHAUSTED
(`validation_busy`), so a burst of submissions cannot build a backlog without end. A caller that goes away
(its client cancelled) frees its place if its validation has not started; one that has started finishes in
its thread and frees the place then, so the bound always counts the children that really run.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from kernelfoundry.api.errors import exhausted

T = TypeVar("T")


class ValidationPool:
    def __init__(self, workers: int, queue: int) -> None:
        if workers < 1 or queue < 0:
            raise ValueError(
                f"a validation pool needs at least one worker and a queue >= 0 ({workers}, {queue})"
            )
        self.workers = workers
        self.queue = queue
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kf-validation")
        self._admitted = 0
        self._lock = threading.Lock()

    @property
    def admitted(self) -> int:
        """Validations running or waiting for a thread."""
        with self._lock:
            return self._admitted

    async def run(self, validation: Callable[[], T]) -> T:
        """`validation()` in a pool thread; raises ApiError(RESOURCE_EXHAUSTED) when the line is full."""
        with self._lock:
            if self._admitted >= self.workers + self.queue:
                raise exhausted(
                    "validation_busy",
                    f"{self._admitted} submitted tasks are being validated or waiting for it "
                    f"(KF_VALIDATION_WORKERS={self.workers}, KF_VALIDATION_QUEUE={self.queue}); "
                    "retry shortly",
                )
            self._admitted += 1
        try:
            future = self._executor.submit(validation)
        except BaseException:
            self._release()
            raise
        future.add_done_callback(self._release)
        # Cancelling the awaiting coroutine cancels `future` too (asyncio.wrap_future chains them): a
        # validation still waiting never starts; a running one finishes and then releases its place.
        return await asyncio.wrap_future(future)

    def _release(self, _: Future[object] | None = None) -> None:
        with self._lock:
            self._admitted -= 1

    def close(self) -> None:
        """Drop validations still waiting; running ones end with their children's deadlines."""
        self._executor.shutdown(wait=False, cancel_futures=True)
