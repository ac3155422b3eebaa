"""Connection, stream topology, publishing with message ids, and the artifact object store.

Streams:
  KF_WORK        work queue of requests (`kf.generate.>`, `kf.compile.>`, `kf.execute.>`); a message is
                 removed once a worker acks it. One durable consumer (a worker pool) per subject.
  KF_EVENTS      the event history (`kf.events.>`), kept by limits; the store and the evolver read it with
                 their own durable consumers, and any replay can too.
  KF_DEADLETTER  messages that kept failing, with their reason (`kf.deadletter.>`).
Every publish carries a message id (Nats-Msg-Id) so the stream drops duplicates of a redelivered task.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import nats
from google.protobuf.message import Message
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.api import (
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import BadRequestError, NotFoundError
from nats.js.object_store import ObjectStore

from kernelfoundry.bus import subjects
from kernelfoundry.telemetry.logging import get_logger

log = get_logger(__name__)

DUPLICATE_WINDOW_S = 600.0
PUBLISH_RETRY_S = 30.0  # longer than a broker restart takes; shorter than a gRPC caller waits


@dataclass(frozen=True)
class Outgoing:
    """A message a handler asks the bus to publish once the incoming message is handled."""

    subject: str
    message: Message
    msg_id: str


class Bus:
    def __init__(self, nc: Client, js: JetStreamContext, *, storage: StorageType = StorageType.FILE) -> None:
        self.nc = nc
        self.js = js
        self._storage = storage
        self._objects: ObjectStore | None = None

    @classmethod
    async def connect(cls, url: str, *, name: str, connect_timeout_s: float = 10.0) -> Bus:
        """Connect (retrying until connect_timeout_s) and make sure the topology exists."""
        deadline = asyncio.get_running_loop().time() + connect_timeout_s
        while True:
            try:
                nc = await nats.connect(
                    url,
                    name=name,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=0.5,
                    connect_timeout=2,
                    allow_reconnect=True,
                )
                break
            except Exception as exc:  # nats raises several unrelated types for "not up yet"
                if asyncio.get_running_loop().time() > deadline:
                    raise ConnectionError(f"cannot reach NATS at {url}: {exc}") from exc
                await asyncio.sleep(0.3)
        bus = cls(nc, nc.jetstream(timeout=10))
        await bus.ensure_topology()
        return bus

    async def ensure_topology(self) -> None:
        await self._ensure_stream(
            StreamConfig(
                name=subjects.WORK_STREAM,
                subjects=[
                    f"{subjects.GENERATE_PREFIX}.>",
                    f"{subjects.COMPILE_PREFIX}.>",
                    f"{subjects.EXECUTE_PREFIX}.>",
                ],
                retention=RetentionPolicy.WORK_QUEUE,
                storage=self._storage,
                duplicate_window=DUPLICATE_WINDOW_S,
            )
        )
        await self._ensure_stream(
            StreamConfig(
                name=subjects.EVENTS_STREAM,
                subjects=[f"{subjects.EVENTS_PREFIX}.>"],
                retention=RetentionPolicy.LIMITS,
                storage=self._storage,
                duplicate_window=DUPLICATE_WINDOW_S,
                discard=DiscardPolicy.OLD,
            )
        )
        await self._ensure_stream(
            StreamConfig(
                name=subjects.DEADLETTER_STREAM,
                subjects=[f"{subjects.DEADLETTER_PREFIX}.>"],
                retention=RetentionPolicy.LIMITS,
                storage=self._storage,
                duplicate_window=DUPLICATE_WINDOW_S,
            )
        )

    async def _ensure_stream(self, config: StreamConfig) -> None:
        try:
            await self.js.stream_info(config.name or "")
        except NotFoundError:
            try:
                await self.js.add_stream(config)
            except BadRequestError:
                # Another service created it between our look and our add.
                await self.js.stream_info(config.name or "")

    async def publish(self, subject: str, message: Message, msg_id: str) -> bool:
        """Publish with a message id; returns True if the stream already had it (a duplicate)."""
        ack = await self.js.publish(subject, message.SerializeToString(), headers={"Nats-Msg-Id": msg_id})
        return bool(ack.duplicate)

    async def publish_all(self, messages: list[Outgoing], *, retry_for_s: float = PUBLISH_RETRY_S) -> None:
        """Publish in order. A publish that fails (the broker is restarting: timeouts, closed connection, no
        JetStream yet) is tried again for up to `retry_for_s`, then its error is raised: the message ids make
        a repeat harmless, and a caller that has already changed its state (a run just created) gets its
        messages out across a broker restart instead of an error after half of them."""
        loop = asyncio.get_running_loop()
        for out in messages:
            deadline = loop.time() + retry_for_s
            delay = 0.2
            while True:
                try:
                    await self.publish(out.subject, out.message, out.msg_id)
                    break
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    if loop.time() + delay > deadline:
                        raise
                    log.warning("publish failed; retrying", subject=out.subject, error=repr(exc))
                    await asyncio.sleep(delay)
                    delay = min(2.0, delay * 2)

    async def artifacts(self) -> ObjectStore:
        if self._objects is None:
            try:
                self._objects = await self.js.object_store(subjects.ARTIFACT_BUCKET)
            except (NotFoundError, BadRequestError, Exception):
                try:
                    self._objects = await self.js.create_object_store(
                        subjects.ARTIFACT_BUCKET, storage=self._storage
                    )
                except BadRequestError:
                    self._objects = await self.js.object_store(subjects.ARTIFACT_BUCKET)
        return self._objects

    async def put_artifact(self, name: str, data: bytes) -> None:
        store = await self.artifacts()
        await store.put(name, data)

    async def get_artifact(self, name: str) -> bytes:
        store = await self.artifacts()
        result = await store.get(name)
        if result.data is None:
            raise LookupError(f"artifact {name!r} is empty or missing")
        return bytes(result.data)

    async def close(self) -> None:
        # Not drain(): pull subscriptions never finish draining, and every message is acked explicitly,
        # so anything unacked is simply redelivered to a peer.
        if not self.nc.is_closed:
            await self.nc.close()
