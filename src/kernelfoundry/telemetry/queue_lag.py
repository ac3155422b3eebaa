"""Samples JetStream consumer backlogs into `kf_queue_lag_messages`, the signal workers autoscale on.

The bus supplies one probe per durable consumer, an async callable returning its `num_pending`;
`consumer_pending_probe(js, stream, durable)` builds one from anything with nats-py's
`consumer_info(stream, durable)` coroutine. This module only schedules the probes and records what they
return, so it imports no transport and is tested with fakes.

A probe that fails leaves the gauge at its last value and is logged: a stale backlog is safer for an
autoscaler than a sudden zero that would scale workers away while NATS is briefly unreachable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

from kernelfoundry.telemetry.logging import get_logger
from kernelfoundry.telemetry.metrics import Metrics

PendingProbe = Callable[[], Awaitable[int]]

_log = get_logger(__name__)


class ConsumerInfoSource(Protocol):
    """What a probe needs of a JetStream context (nats-py's `JetStreamContext` has it)."""

    async def consumer_info(self, stream: str, consumer: str) -> Any: ...


def consumer_pending_probe(js: ConsumerInfoSource, stream: str, durable: str) -> PendingProbe:
    """A probe reading `num_pending` (messages not yet delivered) of one durable consumer."""

    async def probe() -> int:
        info = await js.consumer_info(stream, durable)
        return int(info.num_pending)

    return probe


class QueueLagMonitor:
    """Polls each consumer's backlog every `interval_s` seconds and sets the gauge for it."""

    def __init__(
        self,
        metrics: Metrics,
        service: str,
        probes: Mapping[str, PendingProbe],
        interval_s: float = 5.0,
        probe_timeout_s: float = 2.0,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"invalid_interval: queue lag interval_s={interval_s} must be positive")
        self._metrics = metrics
        self._service = service
        self._probes = dict(probes)
        self._interval_s = interval_s
        self._probe_timeout_s = probe_timeout_s

    async def sample_once(self) -> dict[str, int]:
        """Probe every consumer once; returns the backlogs that were read (failed probes are absent)."""
        consumers = list(self._probes)
        results = await asyncio.gather(
            *(asyncio.wait_for(self._probes[c](), self._probe_timeout_s) for c in consumers),
            return_exceptions=True,
        )
        read: dict[str, int] = {}
        for consumer, result in zip(consumers, results, strict=True):
            if isinstance(result, BaseException):
                if isinstance(result, asyncio.CancelledError):
                    raise result
                _log.warning(
                    "queue_lag_probe_failed",
                    consumer=consumer,
                    reason=type(result).__name__,
                    message=str(result),
                )
                continue
            pending = int(result)
            self._metrics.queue_lag_messages.labels(service=self._service, consumer=consumer).set(pending)
            read[consumer] = pending
        return read

    async def run(self) -> None:
        """Sample until cancelled."""
        while True:
            await self.sample_once()
            await asyncio.sleep(self._interval_s)
