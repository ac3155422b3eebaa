"""JetStreamBus.publish_all rides over a broker restart: failed publishes are retried, then raised."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from kernelfoundry.bus import subjects
from kernelfoundry.bus.jetstream import JetStreamBus, Outgoing
from kernelfoundry.v1 import run_pb2


class RestartingJetStream:
    """Fails the first `failures` publishes, as a JetStream server does while it restarts."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts: list[str] = []

    async def publish(self, subject: str, payload: bytes, headers: dict[str, str]) -> Any:
        self.attempts.append(headers["Nats-Msg-Id"])
        if len(self.attempts) <= self.failures:
            raise TimeoutError("nats: timeout")
        return SimpleNamespace(duplicate=False)


def messages() -> list[Outgoing]:
    return [
        Outgoing(subjects.RUN_SUBMITTED, run_pb2.RunSubmitted(run_id="r1"), "submitted-r1"),
        Outgoing(subjects.RUN_FINISHED, run_pb2.RunFinished(run_id="r1"), "finished-r1"),
    ]


async def test_publishes_that_fail_while_the_broker_restarts_are_retried_in_order() -> None:
    js = RestartingJetStream(failures=2)
    bus = JetStreamBus(nc=None, js=js)  # type: ignore[arg-type]
    await bus.publish_all(messages(), retry_for_s=10.0)
    assert js.attempts == ["submitted-r1", "submitted-r1", "submitted-r1", "finished-r1"]


async def test_a_broker_that_stays_away_gets_its_error_raised_after_the_retry_window() -> None:
    js = RestartingJetStream(failures=1000)
    bus = JetStreamBus(nc=None, js=js)  # type: ignore[arg-type]
    with pytest.raises(TimeoutError, match="nats: timeout"):
        await bus.publish_all(messages(), retry_for_s=0.5)
    assert set(js.attempts) == {"submitted-r1"}  # nothing after the message that could not go out
