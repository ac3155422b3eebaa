"""The JetStream bus (kernelfoundry.bus.protocol.Bus over NATS JetStream): connection, stream topology,
publishing with message ids, durable pull consumers and the artifact object store.

Streams:
  KF_WORK        work queue of requests (`kf.generate.>`, `kf.compile.>`, `kf.execute.>`); a message is
                 removed once a worker acks it. One durable consumer (a worker pool) per subject.
  KF_EVENTS      the event history (`kf.events.>`), kept by limits; the store and the evolver read it with
                 their own durable consumers, and any replay can too.
  KF_DEADLETTER  messages that kept failing, with their reason (`kf.deadletter.>`).
Replicas and the limits of the history and the artifact bucket come from configuration
(kernelfoundry.bus.topology); only the services that own the topology create and update streams (the
others, connecting as restricted NATS users, wait for them: kernelfoundry.bus.permissions).
Every publish carries a message id (Nats-Msg-Id) so the stream drops duplicates of a redelivered task.
The only module that imports nats; everything else speaks the Bus protocol.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from dataclasses import dataclass

import nats
from google.protobuf.message import Message
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    ObjectStoreConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import BadRequestError, NotFoundError, ObjectNotFoundError
from nats.js.object_store import ObjectStore

from kernelfoundry.bus import subjects
from kernelfoundry.bus.permissions import inbox_prefix, manages_topology
from kernelfoundry.bus.protocol import (
    ARTIFACT_READ_S,
    PUBLISH_RETRY_S,
    Bus,
    BusMessage,
    ConsumerSpec,
    ConsumerState,
    Outgoing,
    publish_in_order,
)
from kernelfoundry.bus.topology import Topology, differs
from kernelfoundry.telemetry.logging import get_logger

log = get_logger(__name__)

DUPLICATE_WINDOW_S = 600.0

__all__ = ["DUPLICATE_WINDOW_S", "Bus", "JetStreamBus", "Outgoing", "artifact_digest"]


def artifact_digest(data: bytes) -> str:
    """The digest the object store records for `data` (ObjectInfo.digest)."""
    return "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode()


@dataclass(frozen=True)
class JetStreamMessage:
    """A BusMessage over a nats-py message."""

    msg: Msg

    @property
    def subject(self) -> str:
        return self.msg.subject

    @property
    def data(self) -> bytes:
        return self.msg.data

    @property
    def deliveries(self) -> int:
        return int(self.msg.metadata.num_delivered)

    @property
    def stream_sequence(self) -> int:
        return int(self.msg.metadata.sequence.stream)

    async def ack(self) -> None:
        await self.msg.ack()

    async def nak(self, delay: float | None = None) -> None:
        await self.msg.nak(delay=delay)

    async def term(self) -> None:
        await self.msg.term()

    async def in_progress(self) -> None:
        await self.msg.in_progress()


class JetStreamSubscription:
    """A Subscription over a bound nats-py pull subscription."""

    def __init__(self, sub: JetStreamContext.PullSubscription) -> None:
        self._sub = sub

    async def fetch(self, batch: int, timeout_s: float) -> list[BusMessage]:
        try:
            msgs = await self._sub.fetch(batch, timeout=timeout_s)
        except (TimeoutError, NatsTimeoutError):
            return []
        return [JetStreamMessage(m) for m in msgs]


class JetStreamBus:
    """The Bus protocol over NATS JetStream."""

    def __init__(
        self,
        nc: Client,
        js: JetStreamContext,
        *,
        storage: StorageType = StorageType.FILE,
        topology: Topology | None = None,
        manage_topology: bool = True,
    ) -> None:
        self.nc = nc
        self.js = js
        self._storage = storage
        self.topology = topology or Topology()
        self.manage_topology = manage_topology
        self._objects: ObjectStore | None = None

    @classmethod
    async def connect(
        cls,
        url: str,
        *,
        name: str,
        connect_timeout_s: float = 10.0,
        user: str = "",
        password: str = "",
        topology: Topology | None = None,
        topology_wait_s: float = 120.0,
    ) -> JetStreamBus:
        """Connect (retrying until connect_timeout_s) as `user` (none: the server's default account) and
        make sure the topology exists: created or updated by its owners, waited for (up to
        `topology_wait_s`) by the other services."""
        deadline = asyncio.get_running_loop().time() + connect_timeout_s
        credentials: dict[str, str] = (
            {"user": user, "password": password, "inbox_prefix": inbox_prefix(user)} if user else {}
        )
        refused: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        async def on_error(exc: Exception) -> None:
            # nats retries a refused login forever; a wrong password is an error to report, not wait out
            if "authorization violation" in str(exc).lower() and not refused.done():
                refused.set_result(str(exc))
            log.warning("NATS error", error=str(exc) or type(exc).__name__, user=user)

        while True:
            try:
                connecting = asyncio.ensure_future(
                    nats.connect(
                        url,
                        name=name,
                        max_reconnect_attempts=-1,
                        reconnect_time_wait=0.5,
                        connect_timeout=2,
                        allow_reconnect=True,
                        error_cb=on_error,
                        **credentials,  # type: ignore[arg-type]
                    )
                )
                await asyncio.wait({connecting, refused}, return_when=asyncio.FIRST_COMPLETED)
                if not connecting.done():
                    connecting.cancel()
                    raise PermissionError(f"NATS at {url} refused user {user!r}: {refused.result()}")
                nc = connecting.result()
                break
            except PermissionError as exc:
                raise ConnectionError(str(exc)) from exc
            except Exception as exc:  # nats raises several unrelated types for "not up yet"
                if asyncio.get_running_loop().time() > deadline:
                    raise ConnectionError(f"cannot reach NATS at {url}: {exc}") from exc
                await asyncio.sleep(0.3)
        bus = cls(nc, nc.jetstream(timeout=10), topology=topology, manage_topology=manages_topology(user))
        await bus.ensure_topology(wait_s=topology_wait_s)
        return bus

    def stream_configs(self) -> list[StreamConfig]:
        """The streams of the topology, with this deployment's replicas and limits."""
        events = self.topology.events
        common = {
            "storage": self._storage,
            "duplicate_window": DUPLICATE_WINDOW_S,
            "num_replicas": self.topology.replicas,
        }
        return [
            StreamConfig(
                name=subjects.WORK_STREAM,
                subjects=[
                    f"{subjects.GENERATE_PREFIX}.>",
                    f"{subjects.COMPILE_PREFIX}.>",
                    f"{subjects.EXECUTE_PREFIX}.>",
                ],
                retention=RetentionPolicy.WORK_QUEUE,
                **common,  # type: ignore[arg-type]
            ),
            *(
                StreamConfig(
                    name=name,
                    subjects=[f"{prefix}.>"],
                    retention=RetentionPolicy.LIMITS,
                    discard=DiscardPolicy.OLD,
                    max_age=events.max_age_s,
                    max_bytes=events.nats_max_bytes,
                    **common,  # type: ignore[arg-type]
                )
                for name, prefix in (
                    (subjects.EVENTS_STREAM, subjects.EVENTS_PREFIX),
                    (subjects.DEADLETTER_STREAM, subjects.DEADLETTER_PREFIX),
                )
            ),
        ]

    async def ensure_topology(self, wait_s: float = 120.0) -> None:
        """Create the streams and the artifact bucket, or bring them to the configured replicas and
        limits; a service that does not own the topology waits up to `wait_s` for the streams."""
        if not self.manage_topology:
            for config in self.stream_configs():
                await self._wait_for_stream(config.name or "", wait_s)
            return
        for config in self.stream_configs():
            await self._ensure_stream(config)
        await self._ensure_artifact_stream()

    async def _wait_for_stream(self, name: str, wait_s: float) -> None:
        deadline = asyncio.get_running_loop().time() + wait_s
        while True:
            try:
                await self.js.stream_info(name)
                return
            except NotFoundError:
                if asyncio.get_running_loop().time() > deadline:
                    raise ConnectionError(
                        f"stream {name} does not exist after {wait_s:g} s (the evolver or store make it)"
                    ) from None
                await asyncio.sleep(1.0)

    async def _ensure_stream(self, config: StreamConfig) -> None:
        try:
            info = await self.js.stream_info(config.name or "")
        except NotFoundError:
            try:
                await self.js.add_stream(config)
                return
            except BadRequestError:
                # Another service created it between our look and our add.
                info = await self.js.stream_info(config.name or "")
        await self._update_limits(info.config, config)

    async def _update_limits(self, current: StreamConfig, wanted: StreamConfig) -> None:
        """Bring an existing stream to the configured replicas and limits (its other settings stay)."""
        keys = ("num_replicas", "max_age", "max_bytes")
        changes = differs(
            {k: getattr(current, k) for k in keys},
            {k: getattr(wanted, k) for k in keys if getattr(wanted, k) is not None},
        )
        if not changes:
            return
        updated = current.evolve(**{k: new for k, (_, new) in changes.items()})
        described = {k: list(v) for k, v in changes.items()}
        try:
            await self.js.update_stream(updated)
        except Exception as exc:  # e.g. limits the servers' storage cannot reserve: keep serving as it is
            log.error("stream not updated", stream=current.name, changes=described, error=str(exc))
            return
        log.info("stream updated", stream=current.name, changes=described)

    def _artifact_config(self) -> ObjectStoreConfig:
        limits = self.topology.artifacts
        return ObjectStoreConfig(
            bucket=subjects.ARTIFACT_BUCKET,
            storage=self._storage,
            replicas=self.topology.replicas,
            ttl=limits.max_age_s or None,
            max_bytes=limits.nats_max_bytes,
        )

    async def _ensure_artifact_stream(self) -> None:
        stream = f"OBJ_{subjects.ARTIFACT_BUCKET}"
        try:
            info = await self.js.stream_info(stream)
        except NotFoundError:
            try:
                self._objects = await self.js.create_object_store(
                    subjects.ARTIFACT_BUCKET, config=self._artifact_config()
                )
                return
            except BadRequestError:
                info = await self.js.stream_info(stream)
        wanted = info.config.evolve(
            num_replicas=self.topology.replicas,
            max_age=self.topology.artifacts.max_age_s,
            max_bytes=self.topology.artifacts.nats_max_bytes,
        )
        await self._update_limits(info.config, wanted)

    async def publish(self, subject: str, message: Message, msg_id: str) -> bool:
        """Publish with a message id; returns True if the stream already had it (a duplicate)."""
        ack = await self.js.publish(subject, message.SerializeToString(), headers={"Nats-Msg-Id": msg_id})
        return bool(ack.duplicate)

    async def publish_all(self, messages: list[Outgoing], *, retry_for_s: float = PUBLISH_RETRY_S) -> None:
        """Publish in order. A publish that fails (the broker is restarting: timeouts, closed connection, no
        JetStream yet) is tried again for up to `retry_for_s`, then its error is raised: the message ids make
        a repeat harmless, and a caller that has already changed its state (a run just created) gets its
        messages out across a broker restart instead of an error after half of them."""
        await publish_in_order(self.publish, messages, retry_for_s)

    async def subscribe(self, spec: ConsumerSpec) -> JetStreamSubscription:
        config = ConsumerConfig(
            durable_name=spec.durable,
            ack_policy=AckPolicy.EXPLICIT,
            ack_wait=spec.ack_wait_s,
            # The consumer loop dead-letters at spec.max_deliver; the server-side cap is a backstop for
            # workers that die on the message before they can.
            max_deliver=spec.max_deliver + 2,
            max_ack_pending=spec.max_ack_pending,
            deliver_policy=DeliverPolicy.ALL if spec.deliver_all else DeliverPolicy.NEW,
        )
        if len(spec.filter_subjects) == 1:
            config.filter_subject = spec.filter_subjects[0]
        else:
            config.filter_subjects = list(spec.filter_subjects)
        try:
            info = await self.js.consumer_info(spec.stream, spec.durable)
        except NotFoundError:
            try:
                await self.js.add_consumer(spec.stream, config)
            except Exception:
                await self.js.consumer_info(spec.stream, spec.durable)  # created concurrently by a pool peer
        else:
            have = {info.config.filter_subject} if info.config.filter_subject else set()
            have |= set(info.config.filter_subjects or ())
            if have != set(spec.filter_subjects):  # a new release consumes other subjects: update it
                await self.js.add_consumer(spec.stream, config)
                log.info("consumer filter updated", durable=spec.durable, subjects=list(spec.filter_subjects))
        sub = await self.js.pull_subscribe_bind(durable=spec.durable, stream=spec.stream)
        return JetStreamSubscription(sub)

    async def consumer_state(self, stream: str, durable: str) -> ConsumerState | None:
        try:
            info = await self.js.consumer_info(stream, durable)
        except NotFoundError:
            return None
        return ConsumerState(pending=int(info.num_pending or 0), ack_pending=int(info.num_ack_pending or 0))

    async def consumer_subjects(self, stream: str) -> list[str]:
        try:
            consumers = await self.js.consumers_info(stream)
        except NotFoundError:  # the stream does not exist yet: no consumer
            return []
        found: list[str] = []
        for info in consumers:
            config = info.config
            if config.filter_subject:
                found.append(config.filter_subject)
            found.extend(config.filter_subjects or ())
        return found

    async def stream_messages(self, stream: str) -> int:
        try:
            info = await self.js.stream_info(stream)
        except NotFoundError:
            return 0
        return int(info.state.messages or 0)

    def connected(self) -> bool:
        return bool(self.nc.is_connected)

    async def artifacts(self) -> ObjectStore:
        if self._objects is None:
            try:
                self._objects = await self.js.object_store(subjects.ARTIFACT_BUCKET)
            except (NotFoundError, BadRequestError, Exception):
                if not self.manage_topology:
                    raise  # its owners create it; the caller retries
                try:
                    self._objects = await self.js.create_object_store(
                        subjects.ARTIFACT_BUCKET, config=self._artifact_config()
                    )
                except BadRequestError:
                    self._objects = await self.js.object_store(subjects.ARTIFACT_BUCKET)
        return self._objects

    async def put_artifact(self, name: str, data: bytes) -> None:
        """Store `data` as artifact `name`, unless these very bytes are stored under it already.

        A redelivered or repeated compile request builds the same unit again; putting it again would
        replace the object, and replacing purges the chunks of the old one, which an executor may be
        reading at that moment (it then waits for chunks that no longer exist)."""
        store = await self.artifacts()
        try:
            info = await store.get_info(name)
        except Exception:  # not stored yet (or unreadable): write it
            info = None
        if info is not None and not info.deleted and info.digest == artifact_digest(data):
            return
        await store.put(name, data)

    async def get_artifact(self, name: str, timeout_s: float = ARTIFACT_READ_S) -> bytes:
        """The artifact's bytes; LookupError when it is missing, empty, or not read within `timeout_s`
        (its chunks went away under the read: the object store's own read would wait for them forever)."""
        store = await self.artifacts()
        try:
            result = await asyncio.wait_for(store.get(name), timeout_s)
        except TimeoutError as exc:
            raise LookupError(f"artifact {name!r} was not read within {timeout_s:g} s") from exc
        except ObjectNotFoundError as exc:
            raise LookupError(f"artifact {name!r} is empty or missing") from exc
        if result.data is None:
            raise LookupError(f"artifact {name!r} is empty or missing")
        return bytes(result.data)

    async def delete_artifact(self, name: str) -> None:
        """Remove the artifact: its chunks are purged, its name marked deleted (nothing when not stored)."""
        store = await self.artifacts()
        try:
            await store.delete(name)
        except ObjectNotFoundError:
            return

    async def close(self) -> None:
        # Not drain(): pull subscriptions never finish draining, and every message is acked explicitly,
        # so anything unacked is simply redelivered to a peer.
        if not self.nc.is_closed:
            await self.nc.close()
