"""An in-memory Bus: the JetStream topology and delivery semantics inside one process, for tests.

The same streams as the JetStream bus (a work queue, the event history kept, the dead letters), message
ids de-duplicated within a window, and durable pull consumers with explicit acks:
- a delivered message is delivered again `ack_wait_s` after its delivery (or its last in-progress
  mark) unless acked or termed, and after a nak once its delay is over;
- redeliveries due come first, then new messages in stream order (so one subject's messages come in the
  order they were published); no new message is handed out while `max_ack_pending` are unacked;
- the server-side cap: a message is not delivered more than `max_deliver + 2` times (the consumer loop
  dead-letters it at `max_deliver`);
- on the work stream an acked or termed message is gone; on the other streams it stays for every other
  durable consumer, each with its own cursor; processes bound to one durable share its messages.
Artifacts are bytes in a dict. Nothing here does I/O; time is the event loop's clock.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field

from google.protobuf.message import Message

from kernelfoundry.bus import subjects
from kernelfoundry.bus.protocol import (
    ARTIFACT_READ_S,
    PUBLISH_RETRY_S,
    BusMessage,
    ConsumerSpec,
    ConsumerState,
    Outgoing,
    publish_in_order,
)

DUPLICATE_WINDOW_S = 600.0
SERVER_EXTRA_DELIVERIES = 2  # as the JetStream bus configures its consumers: a backstop above the loop's cap


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS subject matching: `*` is one token, a final `>` one or more."""
    want = pattern.split(".")
    have = subject.split(".")
    for i, token in enumerate(want):
        if token == ">":
            return len(have) > i
        if i >= len(have) or (token != "*" and token != have[i]):
            return False
    return len(want) == len(have)


@dataclass
class _Stored:
    sequence: int
    subject: str
    data: bytes


@dataclass
class _Pending:
    deliveries: int
    due: float  # when it may be delivered again


@dataclass
class _Durable:
    filters: tuple[str, ...]
    ack_wait_s: float
    max_deliveries: int
    max_ack_pending: int
    cursor: int  # the next stream sequence not yet delivered
    pending: dict[int, _Pending] = field(default_factory=dict)

    def wants(self, subject: str) -> bool:
        return any(subject_matches(f, subject) for f in self.filters)


@dataclass
class _Stream:
    name: str
    patterns: tuple[str, ...]
    work_queue: bool
    messages: dict[int, _Stored] = field(default_factory=dict)
    next_sequence: int = 1
    ids: dict[str, float] = field(default_factory=dict)
    durables: dict[str, _Durable] = field(default_factory=dict)

    def holds(self, subject: str) -> bool:
        return any(subject_matches(p, subject) for p in self.patterns)


class InMemoryMessage:
    """One delivery of a stored message; acks go to its durable consumer by stream sequence."""

    def __init__(self, bus: InMemoryBus, stream: _Stream, durable: _Durable, stored: _Stored, n: int) -> None:
        self._bus = bus
        self._stream = stream
        self._durable = durable
        self.subject = stored.subject
        self.data = stored.data
        self.stream_sequence = stored.sequence
        self.deliveries = n

    async def ack(self) -> None:
        self._bus._done(self._stream, self._durable, self.stream_sequence)
        await self._bus._notify()

    async def term(self) -> None:
        self._bus._done(self._stream, self._durable, self.stream_sequence)
        await self._bus._notify()

    async def nak(self, delay: float | None = None) -> None:
        entry = self._durable.pending.get(self.stream_sequence)
        if entry is not None:
            entry.due = self._bus._now() + max(0.0, delay or 0.0)
        await self._bus._notify()

    async def in_progress(self) -> None:
        entry = self._durable.pending.get(self.stream_sequence)
        if entry is not None:
            entry.due = self._bus._now() + self._durable.ack_wait_s


class InMemorySubscription:
    def __init__(self, bus: InMemoryBus, stream: _Stream, durable: _Durable) -> None:
        self._bus = bus
        self._stream = stream
        self._durable = durable

    async def fetch(self, batch: int, timeout_s: float) -> list[BusMessage]:
        return await self._bus._fetch(self._stream, self._durable, batch, timeout_s)


class InMemoryBus:
    """The Bus protocol in one process (see the module's description)."""

    def __init__(
        self, *, duplicate_window_s: float = DUPLICATE_WINDOW_S, clock: Callable[[], float] | None = None
    ) -> None:
        self._window = duplicate_window_s
        self._clock = clock
        self._closed = False
        self._changed = asyncio.Condition()
        self._artifacts: dict[str, bytes] = {}
        self._streams = [
            _Stream(
                subjects.WORK_STREAM,
                (
                    f"{subjects.GENERATE_PREFIX}.>",
                    f"{subjects.COMPILE_PREFIX}.>",
                    f"{subjects.EXECUTE_PREFIX}.>",
                ),
                work_queue=True,
            ),
            _Stream(subjects.EVENTS_STREAM, (f"{subjects.EVENTS_PREFIX}.>",), work_queue=False),
            _Stream(subjects.DEADLETTER_STREAM, (f"{subjects.DEADLETTER_PREFIX}.>",), work_queue=False),
        ]

    def _now(self) -> float:
        return self._clock() if self._clock is not None else asyncio.get_running_loop().time()

    def _check_open(self) -> None:
        if self._closed:
            raise ConnectionError("the in-memory bus is closed")

    def _stream(self, name: str) -> _Stream | None:
        return next((s for s in self._streams if s.name == name), None)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    async def ensure_topology(self) -> None:
        self._check_open()

    async def publish(self, subject: str, message: Message, msg_id: str) -> bool:
        self._check_open()
        stream = next((s for s in self._streams if s.holds(subject)), None)
        if stream is None:
            raise LookupError(f"no stream holds subject {subject!r}")
        now = self._now()
        seen = stream.ids.get(msg_id)
        if seen is not None and now - seen < self._window:
            return True
        stream.ids[msg_id] = now
        sequence = stream.next_sequence
        stream.next_sequence += 1
        stream.messages[sequence] = _Stored(sequence, subject, message.SerializeToString())
        await self._notify()
        return False

    async def publish_all(self, messages: list[Outgoing], *, retry_for_s: float = PUBLISH_RETRY_S) -> None:
        await publish_in_order(self.publish, messages, retry_for_s)

    async def subscribe(self, spec: ConsumerSpec) -> InMemorySubscription:
        self._check_open()
        stream = self._stream(spec.stream)
        if stream is None:
            raise LookupError(f"no stream {spec.stream!r}")
        durable = stream.durables.get(spec.durable)
        if durable is None and stream.work_queue and not spec.deliver_all:
            raise ValueError(f"a consumer of the work queue {stream.name} must deliver all its messages")
        if durable is None:  # created by the first process that binds it; later ones share it
            durable = _Durable(
                filters=tuple(spec.filter_subjects),
                ack_wait_s=spec.ack_wait_s,
                max_deliveries=spec.max_deliver + SERVER_EXTRA_DELIVERIES,
                max_ack_pending=spec.max_ack_pending,
                cursor=1 if spec.deliver_all else stream.next_sequence,
            )
            stream.durables[spec.durable] = durable
        return InMemorySubscription(self, stream, durable)

    def _done(self, stream: _Stream, durable: _Durable, sequence: int) -> None:
        if durable.pending.pop(sequence, None) is not None and stream.work_queue:
            stream.messages.pop(sequence, None)

    def _take(self, stream: _Stream, durable: _Durable, batch: int) -> list[BusMessage]:
        now = self._now()
        taken: list[BusMessage] = []
        for sequence in sorted(durable.pending):
            if len(taken) >= batch:
                return taken
            entry = durable.pending[sequence]
            if entry.due > now:
                continue
            stored = stream.messages.get(sequence)
            if stored is None or entry.deliveries >= durable.max_deliveries:
                del durable.pending[sequence]  # gone from the stream, or the server-side cap reached
                continue
            entry.deliveries += 1
            entry.due = now + durable.ack_wait_s
            taken.append(InMemoryMessage(self, stream, durable, stored, entry.deliveries))
        for sequence in range(durable.cursor, stream.next_sequence):
            if len(taken) >= batch or len(durable.pending) >= durable.max_ack_pending:
                break
            durable.cursor = sequence + 1
            stored = stream.messages.get(sequence)
            if stored is None or not durable.wants(stored.subject):
                continue
            durable.pending[sequence] = _Pending(deliveries=1, due=now + durable.ack_wait_s)
            taken.append(InMemoryMessage(self, stream, durable, stored, 1))
        return taken

    def _next_due(self, durable: _Durable) -> float | None:
        return min((e.due for e in durable.pending.values()), default=None)

    async def _fetch(
        self, stream: _Stream, durable: _Durable, batch: int, timeout_s: float
    ) -> list[BusMessage]:
        deadline = self._now() + timeout_s
        while True:
            self._check_open()
            async with self._changed:
                taken = self._take(stream, durable, max(batch, 1))
                if taken:
                    return taken
                now = self._now()
                if now >= deadline:
                    return []
                wait = deadline - now
                due = self._next_due(durable)
                if due is not None:
                    wait = min(wait, max(due - now, 0.001))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), wait)

    def _pending_count(self, stream: _Stream, durable: _Durable) -> int:
        return sum(
            1
            for sequence, stored in stream.messages.items()
            if sequence >= durable.cursor and durable.wants(stored.subject)
        )

    async def consumer_state(self, stream: str, durable: str) -> ConsumerState | None:
        self._check_open()
        found = self._stream(stream)
        consumer = found.durables.get(durable) if found is not None else None
        if found is None or consumer is None:
            return None
        return ConsumerState(pending=self._pending_count(found, consumer), ack_pending=len(consumer.pending))

    async def consumer_subjects(self, stream: str) -> list[str]:
        self._check_open()
        found = self._stream(stream)
        if found is None:
            return []
        return [f for durable in found.durables.values() for f in durable.filters]

    async def stream_messages(self, stream: str) -> int:
        self._check_open()
        found = self._stream(stream)
        return len(found.messages) if found is not None else 0

    async def put_artifact(self, name: str, data: bytes) -> None:
        self._check_open()
        self._artifacts[name] = bytes(data)

    async def get_artifact(self, name: str, timeout_s: float = ARTIFACT_READ_S) -> bytes:
        self._check_open()
        data = self._artifacts.get(name)
        if not data:
            raise LookupError(f"artifact {name!r} is empty or missing")
        return data

    async def delete_artifact(self, name: str) -> None:
        self._check_open()
        self._artifacts.pop(name, None)

    def connected(self) -> bool:
        return not self._closed

    async def close(self) -> None:
        self._closed = True
        await self._notify()
