"""Behaviour of the queue-lag monitor: probes become gauge values, failures keep the last value."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.telemetry.queue_lag import QueueLagMonitor, consumer_pending_probe


def _lag(metrics: Metrics, consumer: str) -> float | None:
    return metrics.registry.get_sample_value(
        "kf_queue_lag_messages", {"service": "compiler", "consumer": consumer}
    )


async def test_sample_once_sets_the_gauge_per_consumer() -> None:
    metrics = Metrics(process_collectors=False)

    async def cpu() -> int:
        return 12

    async def cuda() -> int:
        return 0

    monitor = QueueLagMonitor(metrics, "compiler", {"compile-cpu-x86_64": cpu, "compile-cuda-sm90": cuda})
    assert await monitor.sample_once() == {"compile-cpu-x86_64": 12, "compile-cuda-sm90": 0}
    assert _lag(metrics, "compile-cpu-x86_64") == 12.0
    assert _lag(metrics, "compile-cuda-sm90") == 0.0


async def test_a_failing_probe_keeps_the_last_value_and_spares_the_others() -> None:
    metrics = Metrics(process_collectors=False)
    answers: list[int | Exception] = [7, ConnectionError("nats unreachable")]

    async def flaky() -> int:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def steady() -> int:
        return 3

    monitor = QueueLagMonitor(metrics, "compiler", {"flaky": flaky, "steady": steady})
    await monitor.sample_once()
    assert await monitor.sample_once() == {"steady": 3}
    assert _lag(metrics, "flaky") == 7.0


async def test_a_hanging_probe_times_out_instead_of_stalling_the_monitor() -> None:
    metrics = Metrics(process_collectors=False)

    async def hangs() -> int:
        await asyncio.sleep(60)
        return 1

    monitor = QueueLagMonitor(metrics, "compiler", {"hangs": hangs}, probe_timeout_s=0.01)
    assert await monitor.sample_once() == {}
    assert _lag(metrics, "hangs") is None


async def test_run_samples_repeatedly_until_cancelled() -> None:
    metrics = Metrics(process_collectors=False)
    calls = 0
    sampled_thrice = asyncio.Event()

    async def probe() -> int:
        nonlocal calls
        calls += 1
        if calls >= 3:
            sampled_thrice.set()
        return calls

    task = asyncio.create_task(QueueLagMonitor(metrics, "compiler", {"c": probe}, interval_s=0.001).run())
    await asyncio.wait_for(sampled_thrice.wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert (_lag(metrics, "c") or 0) >= 2


def test_a_non_positive_interval_is_rejected() -> None:
    with pytest.raises(ValueError, match="invalid_interval"):
        QueueLagMonitor(Metrics(process_collectors=False), "compiler", {}, interval_s=0)


@dataclass
class _ConsumerInfo:
    num_pending: int
    num_ack_pending: int


class _FakeJetStream:
    def __init__(self, pending: dict[tuple[str, str], int]) -> None:
        self.pending = pending

    async def consumer_info(self, stream: str, consumer: str) -> _ConsumerInfo:
        return _ConsumerInfo(num_pending=self.pending[(stream, consumer)], num_ack_pending=99)


async def test_consumer_pending_probe_reads_num_pending_of_the_named_consumer() -> None:
    js = _FakeJetStream({("KF_WORK", "executor-cuda-h200"): 6, ("KF_WORK", "compiler-cpu-x86_64"): 1})
    metrics = Metrics(process_collectors=False)
    probes = {
        "executor-cuda-h200": consumer_pending_probe(js, "KF_WORK", "executor-cuda-h200"),
        "compiler-cpu-x86_64": consumer_pending_probe(js, "KF_WORK", "compiler-cpu-x86_64"),
    }
    assert await QueueLagMonitor(metrics, "compiler", probes).sample_once() == {
        "executor-cuda-h200": 6,
        "compiler-cpu-x86_64": 1,
    }
