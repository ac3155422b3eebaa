"""The one consumer loop every service uses: fetch, decode, handle, publish, ack.

Written once so no service repeats it. Semantics:
- at-least-once: a message is acked only after the handler returned and its outgoing messages were
  published (with message ids, so a redelivered message produces no duplicates downstream); a publish that
  fails (the broker is restarting) is retried until it goes through, never answered by running the handler
  again: a stateful handler (the evolver) has already acted, and on redelivery it would emit nothing;
- one message at a time per loop (`batch=1`): a worker fetches again only after it acked or nak'ed;
- long handlers send in-progress acks on a heartbeat shorter than ack_wait;
- a message that cannot be decoded, that a handler rejects, or that was delivered more than
  max_deliver times goes to `kf.deadletter.<subject>` with its reason, and is terminated; a work request
  dead-lettered so also ends its work with a failure event (`abandoned_work`), so no run waits for it;
- a handler that raises anything else gets the message redelivered after a delay (nak with backoff);
- after a broker restart (or any error of the bus) the subscription is bound again.
It speaks only the Bus protocol (kernelfoundry.bus.protocol): the same loop runs on JetStream and in memory.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from google.protobuf.message import DecodeError, Message

from kernelfoundry.bus import subjects
from kernelfoundry.bus.abandoned_work import failure_event
from kernelfoundry.bus.protocol import Bus, BusMessage, ConsumerSpec, Outgoing, Subscription
from kernelfoundry.telemetry.logging import get_logger
from kernelfoundry.v1 import run_pb2

log = get_logger(__name__)

M = TypeVar("M", bound=Message)


class Reject(Exception):
    """Raised by a handler for a message that can never succeed: it is dead-lettered now."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason
        self.message = message


class Retry(Exception):
    """Raised by a handler that wants the message again later (e.g. a dependency is not ready)."""

    def __init__(self, message: str, delay_s: float = 1.0) -> None:
        super().__init__(message)
        self.delay_s = delay_s


@dataclass(frozen=True)
class Delivery:
    subject: str
    deliveries: int
    stream_sequence: int


Handler = Callable[[M, Delivery], Awaitable[Sequence[Outgoing]]]


@dataclass
class ConsumerStats:
    handled: int = 0
    failed: int = 0
    dead_lettered: int = 0


class Consumer(Generic[M]):
    def __init__(
        self,
        bus: Bus,
        spec: ConsumerSpec,
        decode: Callable[[str, bytes], M],
        handler: Handler[M],
        *,
        service: str,
        on_result: Callable[[str, str, float], None] | None = None,
    ) -> None:
        self.bus = bus
        self.spec = spec
        self.decode = decode
        self.handler = handler
        self.service = service
        self.on_result = on_result  # (subject, outcome, seconds) for metrics
        self.stats = ConsumerStats()

    async def run(self, stop: asyncio.Event) -> None:
        sub: Subscription | None = None
        inflight: set[asyncio.Task[None]] = set()
        try:
            while not stop.is_set():
                try:
                    if sub is None:
                        await self.bus.ensure_topology()
                        sub = await self.bus.subscribe(self.spec)
                        log.info(
                            "consumer bound",
                            durable=self.spec.durable,
                            subjects=list(self.spec.filter_subjects),
                        )
                    inflight = {t for t in inflight if not t.done()}
                    room = self.spec.concurrency - len(inflight)
                    if room <= 0:
                        _, inflight = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
                        continue
                    want = room if self.spec.concurrency > 1 else max(self.spec.batch, 1)
                    msgs = await sub.fetch(want, timeout_s=1.0)
                    for msg in msgs:
                        if self.spec.concurrency <= 1:
                            await self._process(msg)
                        else:
                            inflight.add(asyncio.create_task(self._process(msg)))
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning(
                        "consumer lost its subscription; rebinding",
                        durable=self.spec.durable,
                        error=repr(exc),
                    )
                    sub = None
                    await asyncio.sleep(0.5)
        except asyncio.CancelledError:
            for task in inflight:  # unacked: the broker redelivers them to whoever consumes next
                task.cancel()
            raise
        # stopped: let started work finish and be acked rather than left to redelivery
        if inflight:
            await asyncio.gather(*inflight, return_exceptions=True)

    async def _process(self, msg: BusMessage) -> None:
        delivery = Delivery(
            subject=msg.subject, deliveries=msg.deliveries, stream_sequence=msg.stream_sequence
        )
        started = time.perf_counter()
        try:
            decoded = self.decode(msg.subject, msg.data)
        except (DecodeError, KeyError, ValueError) as exc:
            await self._dead_letter(
                msg, delivery, "undecodable", f"cannot decode message on {msg.subject}: {exc}"
            )
            return
        if delivery.deliveries > self.spec.max_deliver:
            await self._dead_letter(
                msg, delivery, "max_deliveries", f"delivered {delivery.deliveries} times", decoded
            )
            return
        heartbeat = asyncio.create_task(self._heartbeat(msg))
        try:
            outgoing = await self.handler(decoded, delivery)
            await self._publish_outputs(list(outgoing))
        except Reject as exc:
            heartbeat.cancel()
            await self._dead_letter(msg, delivery, exc.reason, exc.message, decoded)
            return
        except Retry as exc:
            heartbeat.cancel()
            self._report(msg.subject, "retry", started)
            await msg.nak(delay=exc.delay_s)
            return
        except asyncio.CancelledError:
            heartbeat.cancel()
            raise
        except Exception as exc:
            heartbeat.cancel()
            self.stats.failed += 1
            self._report(msg.subject, "error", started)
            log.exception(
                "handler failed; will redeliver", subject=msg.subject, deliveries=delivery.deliveries
            )
            if delivery.deliveries >= self.spec.max_deliver:
                await self._dead_letter(
                    msg, delivery, "handler_error", f"{type(exc).__name__}: {exc}", decoded
                )
            else:
                await msg.nak(delay=min(30.0, 0.5 * 2**delivery.deliveries))
            return
        finally:
            heartbeat.cancel()
        await msg.ack()
        self.stats.handled += 1
        self._report(msg.subject, "ok", started)

    async def _publish_outputs(self, outgoing: list[Outgoing]) -> None:
        """Publish a handled message's outputs, retrying while the broker is away (each publish carries its
        message id, so the ones that went through before a failure are not stored twice)."""
        delay = self.spec.publish_retry_s
        while True:
            try:
                await self.bus.publish_all(outgoing)
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(
                    "publishing a handled message's outputs failed; retrying",
                    durable=self.spec.durable,
                    outputs=len(outgoing),
                    error=repr(exc),
                )
                await asyncio.sleep(delay)
                delay = min(2.0, delay * 2)

    async def _heartbeat(self, msg: BusMessage) -> None:
        try:
            while True:
                await asyncio.sleep(self.spec.heartbeat_s)
                await msg.in_progress()
        except asyncio.CancelledError:
            return
        except Exception as exc:  # a lost heartbeat only risks a redelivery, which is idempotent
            log.warning("in-progress ack failed", error=str(exc))

    async def _dead_letter(
        self, msg: BusMessage, delivery: Delivery, reason: str, message: str, decoded: Message | None = None
    ) -> None:
        # The failure first, the letter next, the termination last: a process killed in between gets the
        # message again and publishes both again under the same ids, which the streams de-duplicate.
        ending = failure_event(decoded, reason, message) if decoded is not None else None
        if ending is not None:
            await self.bus.publish(ending.subject, ending.message, ending.msg_id)
        letter = run_pb2.DeadLetter(
            subject=msg.subject,
            data=msg.data,
            reason=reason,
            message=message[:4000],
            deliveries=delivery.deliveries,
            service=self.service,
        )
        # one letter per consumer: an event that the store and the evolver both give up on is two letters
        msg_id = f"dl-{self.spec.durable}-{self.spec.stream}-{delivery.stream_sequence}"
        await self.bus.publish(subjects.deadletter(msg.subject), letter, msg_id)
        await msg.term()
        self.stats.dead_lettered += 1
        self._report(msg.subject, f"dead_letter:{reason}", time.perf_counter())
        log.error("message dead-lettered", subject=msg.subject, reason=reason, message=message[:500])

    def _report(self, subject: str, outcome: str, started: float) -> None:
        if self.on_result is not None:
            self.on_result(subject, outcome, time.perf_counter() - started)


def decoder_for(message_type: type[M]) -> Callable[[str, bytes], M]:
    """A decoder for subjects that carry one message type."""

    def decode(_subject: str, data: bytes) -> M:
        message = message_type()
        message.ParseFromString(data)
        return message

    return decode
