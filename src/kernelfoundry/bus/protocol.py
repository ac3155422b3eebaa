"""The Bus protocol: everything the services, the consumer loop and the service host ask of a message bus.

Derived from what they call, nothing more:
- `publish` / `publish_all` with message ids (a repeated id is stored once: a duplicate);
- `subscribe` to a durable consumer (created if missing, shared by every process that binds it), which
  hands out `BusMessage`s to `ack`, `nak` (redeliver, after a delay), `term` (never again) or mark
  `in_progress` (the ack deadline starts again);
- `consumer_state` (backlog and unacknowledged counts: queue lag, resume's wait for the store),
  `consumer_subjects` (what the work stream's consumers serve), `stream_messages`;
- the artifact store (`put_artifact`, `get_artifact`, `delete_artifact`), `connected`,
  `ensure_topology`, `close`.

Delivery semantics every implementation keeps (tests/contract/bus checks both against one suite):
at-least-once (a message is delivered again until it is acked or termed; `ack_wait_s` after its last
delivery or in-progress mark, or after a nak's delay), one cursor per durable consumer (two durables on
one stream each see every message; processes bound to one durable share its messages), messages of one
subject delivered in the order they were published, a work-stream message gone once acked or termed,
an event-stream message kept for every other consumer. Dead-lettering after `max_deliver` is the
consumer loop's (kernelfoundry.bus.consumer), the same on every bus.

Implementations: kernelfoundry.bus.jetstream.JetStreamBus (NATS JetStream) and
kernelfoundry.bus.memory.InMemoryBus (one process, for tests).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from google.protobuf.message import Message

from kernelfoundry.telemetry.logging import get_logger

log = get_logger(__name__)

PUBLISH_RETRY_S = 30.0  # longer than a broker restart takes; shorter than a gRPC caller waits
ARTIFACT_READ_S = 60.0  # units are kilobytes to a few megabytes: seconds even on a loaded host


@dataclass(frozen=True)
class Outgoing:
    """A message a handler asks the bus to publish once the incoming message is handled."""

    subject: str
    message: Message
    msg_id: str


@dataclass(frozen=True)
class ConsumerSpec:
    stream: str
    durable: str
    filter_subjects: tuple[str, ...]
    ack_wait_s: float = 30.0
    max_deliver: int = 5
    max_ack_pending: int = 64
    heartbeat_s: float = 5.0
    batch: int = 1
    deliver_all: bool = True
    # messages handled at once by this process (each with its own heartbeat); 1 keeps the handler serial
    concurrency: int = 1
    # first wait before publishing a handled message's outputs again (doubling up to 2 s)
    publish_retry_s: float = 0.2


@dataclass(frozen=True)
class ConsumerState:
    """A durable consumer's counts: `pending` not delivered yet, `ack_pending` delivered and not yet
    acked or termed (a nak'ed message waiting for its redelivery included)."""

    pending: int
    ack_pending: int


class BusMessage(Protocol):
    """One delivery of a stored message."""

    @property
    def subject(self) -> str: ...

    @property
    def data(self) -> bytes: ...

    @property
    def deliveries(self) -> int:
        """How often this message has been delivered to its consumer, this delivery included."""
        ...

    @property
    def stream_sequence(self) -> int: ...

    async def ack(self) -> None: ...

    async def nak(self, delay: float | None = None) -> None: ...

    async def term(self) -> None: ...

    async def in_progress(self) -> None: ...


class Subscription(Protocol):
    async def fetch(self, batch: int, timeout_s: float) -> list[BusMessage]:
        """Up to `batch` messages; an empty list when none came within `timeout_s`."""
        ...


class Bus(Protocol):
    async def ensure_topology(self) -> None:
        """Make sure the streams exist (idempotent; every consumer loop calls it before binding)."""
        ...

    async def publish(self, subject: str, message: Message, msg_id: str) -> bool:
        """Publish with a message id; True when the stream already had that id (a duplicate)."""
        ...

    async def publish_all(self, messages: list[Outgoing], *, retry_for_s: float = PUBLISH_RETRY_S) -> None:
        """Publish in order, each failed publish tried again for up to `retry_for_s`, then raised."""
        ...

    async def subscribe(self, spec: ConsumerSpec) -> Subscription:
        """Bind to the durable consumer `spec.durable` on `spec.stream`, creating it if missing."""
        ...

    async def consumer_state(self, stream: str, durable: str) -> ConsumerState | None:
        """The durable consumer's counts; None when it does not exist."""
        ...

    async def consumer_subjects(self, stream: str) -> list[str]:
        """The filter subjects of every consumer on `stream`; empty when the stream does not exist.
        Raises when the bus does not answer."""
        ...

    async def stream_messages(self, stream: str) -> int:
        """How many messages `stream` holds (0 when it does not exist)."""
        ...

    async def put_artifact(self, name: str, data: bytes) -> None:
        """Store `data` as artifact `name`, leaving it alone when these very bytes are stored already."""
        ...

    async def get_artifact(self, name: str, timeout_s: float = ARTIFACT_READ_S) -> bytes:
        """The artifact's bytes; LookupError when it is missing, empty or not read within `timeout_s`."""
        ...

    async def delete_artifact(self, name: str) -> None:
        """Remove artifact `name` (nothing when it is not stored)."""
        ...

    def connected(self) -> bool: ...

    async def close(self) -> None: ...


async def publish_in_order(
    publish: Callable[[str, Message, str], Awaitable[bool]], messages: list[Outgoing], retry_for_s: float
) -> None:
    """Publish `messages` in order through `publish`; a failed publish is tried again (doubling waits up
    to 2 s) for up to `retry_for_s`, then its error is raised, with nothing after it sent."""
    loop = asyncio.get_running_loop()
    for out in messages:
        deadline = loop.time() + retry_for_s
        delay = 0.2
        while True:
            try:
                await publish(out.subject, out.message, out.msg_id)
                break
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if loop.time() + delay > deadline:
                    raise
                log.warning("publish failed; retrying", subject=out.subject, error=repr(exc))
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 2)
