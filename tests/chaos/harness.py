"""The chaos harness: concurrent runs through the embedded stack while the broker and every service are
SIGKILLed at random moments and restarted, then the invariants of `invariants.py` are checked.

Test support, not product code: the CI test (tests/chaos/test_chaos.py) runs one short seeded round, and
bench/chaos_bench.py runs many rounds as a soak. Loopback only: the stack binds 127.0.0.1, and nothing here
reaches outside the machine. Bounded in time: the chaos lasts `chaos_s`, and the settling after it (runs
end, consumers catch up, work queues drain) gives up after `settle_s` and reports what it found.

One round: submit the runs (in `waves` spread over the chaos: later waves are submitted while processes
die, retried while the evolver is down), play the kill plan (one target down at a time, restarted after
its down time), make sure every process is up again, wait for the system to settle, then observe the
lineage (through the store's gRPC API, and the evolver's resume replay for the archive) and the broker
(the event history, the work stream and the dead letters) and check. Any run the lineage still lists as
running, submitted in this round or not (a submission cut short by a kill), is a run that never ended.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

import grpc
import nats
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from kernelfoundry.bus import subjects
from kernelfoundry.client import KernelFoundryClient, LineageClient
from kernelfoundry.domain.speedup import RETIME_MARKER
from kernelfoundry.services.evolver.resume import restore_run
from kernelfoundry.services.evolver.runs import RunCoordinator
from kernelfoundry.stack.hardware import cpu_target
from kernelfoundry.stack.supervisor import Stack
from kernelfoundry.tasks.loading import load_task
from kernelfoundry.tasks.model import ShapeVariant, Task
from kernelfoundry.v1 import evaluation_pb2, lineage_pb2, run_pb2, search_pb2

from .invariants import (
    FINAL_STATUSES,
    BrokerState,
    DeadLetterView,
    RunLineage,
    Tally,
    Violation,
    check,
    tally,
)
from .plan import BROKER, Kill, plan_kills

ROOT = Path(__file__).resolve().parents[2]

# Small shapes and few timed runs keep an evaluation around a second on two cores; a short ack_wait makes
# the broker hand a killed worker's message to its successor within seconds.
CHAOS_ENV = {
    "KF_TIMED_RUNS": "10",
    "KF_CORRECTNESS_TRIALS": "5",
    "KF_LOG_FORMAT": "json",
    "KF_ACK_WAIT_S": "6",
    "KF_HEARTBEAT_S": "2",
    "KF_RESUME_WAIT_S": "30",
}
TARGETS = (BROKER, "store", "llm", "compiler", "executor", "evolver")


@dataclass(frozen=True)
class ChaosSettings:
    seed: int = 1
    runs: int = 2
    iterations: int = 1
    population: int = 2
    chaos_s: float = 40.0
    mean_gap_s: float = 4.0
    max_down_s: float = 1.0
    settle_s: float = 240.0
    targets: tuple[str, ...] = TARGETS
    waves: int = 1  # submissions of `runs` runs each, the first at the start, the others during the chaos


@dataclass
class ChaosReport:
    seed: int
    kills: list[Kill]
    submitted: list[str]
    violations: list[Violation]
    tally: Tally
    dead_letters: dict[str, int]  # by reason
    settled: bool
    wall_s: float
    statuses: dict[str, str] = field(default_factory=dict)

    def kills_by_target(self) -> dict[str, int]:
        return dict(Counter(k.target for k in self.kills))


def _small(task: Task, **shape: int) -> Task:
    return replace(task, shapes=(ShapeVariant("small", shape),))


def chaos_tasks() -> list[Task]:
    """The tasks rounds cycle through: a fusable level-2 chain and a level-1 elementwise op."""
    return [
        _small(load_task(ROOT / "tasks" / "level2_elementwise_chain.py"), batch_size=256, dim=4096),
        _small(load_task(ROOT / "tasks" / "level1_relu.py"), batch_size=128, dim=4096),
    ]


def start_stack(state_dir: Path) -> Stack:
    stack = Stack(state_dir=state_dir, hardware=[cpu_target()], extra_env=CHAOS_ENV)
    stack.start()
    return stack


class ChaosRound:
    """One round against a running stack; `say` receives one line per kill and phase (progress output)."""

    def __init__(self, stack: Stack, settings: ChaosSettings, say: Callable[[str], None] = lambda _: None):
        self.stack = stack
        self.settings = settings
        self.say = say

    def run(self) -> ChaosReport:
        started = time.monotonic()
        s = self.settings
        submitted = self._submit(wave=0)
        plan = plan_kills(
            s.seed, duration_s=s.chaos_s, targets=s.targets, mean_gap_s=s.mean_gap_s, max_down_s=s.max_down_s
        )
        done = self._play(plan, submitted)
        self._revive_all()
        settled = self._settle(submitted, time.monotonic() + s.settle_s)
        runs, broker, running = asyncio.run(self._observe(submitted))
        letters = Counter(letter.reason for letter in broker.dead_letters)
        stray = [
            Violation(
                "run_not_final", f"run {run_id} (not in this round's answers) is running in the lineage"
            )
            for run_id in sorted(set(running) - set(submitted))
        ]
        return ChaosReport(
            seed=s.seed,
            kills=done,
            submitted=submitted,
            violations=check(submitted, runs, broker) + stray,
            tally=tally(submitted, runs, broker),
            dead_letters=dict(letters),
            settled=settled,
            wall_s=time.monotonic() - started,
            statuses={r: runs[r].status if r in runs else "" for r in submitted},
        )

    # ---- driving ----
    def _submit(self, wave: int) -> list[str]:
        """Submit one wave of runs, retrying each while the evolver or the broker is down."""
        client = KernelFoundryClient(self.stack.grpc_address)
        try:
            tasks = chaos_tasks()
            ids = []
            for index in range(self.settings.runs):
                config = run_pb2.RunConfig(
                    hardware=cpu_target().execute,
                    iterations=self.settings.iterations,
                    population=self.settings.population,
                    sweeps=False,
                    seed=self.settings.seed * 1000 + wave * 100 + index,
                )
                ids.append(self._submit_one(client, tasks[index % len(tasks)], config))
            self.say(f"wave {wave}: submitted {len(ids)} runs: {', '.join(ids)}")
            return ids
        finally:
            client.close()

    def _submit_one(self, client: KernelFoundryClient, task: Task, config: run_pb2.RunConfig) -> str:
        deadline = time.monotonic() + 120.0
        while True:
            try:
                return client.submit(task, config, timeout_s=60.0)
            except grpc.RpcError as exc:
                retriable = exc.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED)
                if not retriable or time.monotonic() > deadline:
                    raise
                if not self._evolver_and_broker_alive():
                    self._revive_all()  # a submission is not a kill target: it waits for its restart
                time.sleep(0.5)

    def _evolver_and_broker_alive(self) -> bool:
        assert self.stack.nats is not None
        return self.stack.nats.alive() and self.stack.service("evolver").alive()

    def _play(self, plan: list[Kill], submitted: list[str]) -> list[Kill]:
        start = time.monotonic()
        done: list[Kill] = []
        waves_due = [self.settings.chaos_s * w / self.settings.waves for w in range(1, self.settings.waves)]
        for kill in plan:
            while waves_due and time.monotonic() - start >= waves_due[0]:
                waves_due.pop(0)
                submitted += self._submit(wave=self.settings.waves - len(waves_due) - 1)
            wait = start + kill.at_s - time.monotonic()
            if wait > 0:
                time.sleep(wait)  # the schedule itself, not a synchronisation
            self._kill(kill.target)
            time.sleep(kill.down_s)
            self._restart(kill.target)
            done.append(kill)
            self.say(f"t={time.monotonic() - start:6.1f}s killed {kill.target}, down {kill.down_s:.2f}s")
        return done

    def _kill(self, target: str) -> None:
        if target == BROKER:
            assert self.stack.nats is not None
            self.stack.nats.kill()
        else:
            self.stack.service(target).kill()

    def _restart(self, target: str) -> None:
        if target == BROKER:
            assert self.stack.nats is not None
            self.stack.nats.start()
        else:
            self.stack.service(target).start()

    def _revive_all(self) -> None:
        """Anything that died on its own during the chaos (a crash, not a kill) is a finding: restart it
        so the round can settle, and say so."""
        assert self.stack.nats is not None
        if not self.stack.nats.alive():
            self.say("the broker was down after the chaos; restarting it")
            self.stack.nats.start()
        for name, service in self.stack.services.items():
            if not service.alive():
                self.say(f"service {name} was down after the chaos (exited on its own); restarting it")
                service.start()

    def _settle(self, submitted: list[str], deadline: float) -> bool:
        """True once every run is final in the lineage, the store and the evolver have consumed the whole
        history, and the work stream is empty."""
        while time.monotonic() < deadline:
            if asyncio.run(self._quiet(submitted)):
                self.say("settled")
                return True
            time.sleep(1.0)
        self.say(f"did not settle in time: {asyncio.run(self._backlog())}")
        return False

    async def _backlog(self) -> str:
        """What is still queued or in flight per consumer: tells a slow system from a stuck one."""
        try:
            nc = await nats.connect(self.stack.nats_url, connect_timeout=2, max_reconnect_attempts=0)
        except Exception as exc:
            return f"broker unreachable: {exc!r}"
        try:
            js = nc.jetstream(timeout=5)
            parts = []
            for stream in (subjects.WORK_STREAM, subjects.EVENTS_STREAM):
                for info in await js.consumers_info(stream):
                    parts.append(f"{info.name} pending={info.num_pending} in-flight={info.num_ack_pending}")
            return ", ".join(parts)
        finally:
            await nc.close()

    async def _quiet(self, submitted: list[str]) -> bool:
        try:
            client = LineageClient(self.stack.store_grpc_address)
            try:
                for run_id in submitted:
                    record = await client.get_run(run_id, timeout_s=5.0)
                    if record.status not in FINAL_STATUSES:
                        return False
            finally:
                await client.close()
            nc = await nats.connect(self.stack.nats_url, connect_timeout=2, max_reconnect_attempts=0)
            try:
                js = nc.jetstream(timeout=5)
                for durable in ("store", "evolver"):
                    info = await js.consumer_info(subjects.EVENTS_STREAM, durable)
                    if info.num_pending or info.num_ack_pending:
                        return False
                work = await js.stream_info(subjects.WORK_STREAM)
                return work.state.messages == 0
            finally:
                await nc.close()
        except (grpc.RpcError, Exception):  # a process still starting: not quiet yet
            return False

    # ---- observing ----
    async def _observe(self, submitted: list[str]) -> tuple[dict[str, RunLineage], BrokerState, list[str]]:
        nc = await nats.connect(self.stack.nats_url, connect_timeout=5)
        try:
            js = nc.jetstream(timeout=10)
            history = await _read_stream(js, subjects.EVENTS_STREAM, f"{subjects.EVENTS_PREFIX}.>")
            letters = await _read_stream(js, subjects.DEADLETTER_STREAM, f"{subjects.DEADLETTER_PREFIX}.>")
            work = (await js.stream_info(subjects.WORK_STREAM)).state.messages
        finally:
            await nc.close()
        created: dict[str, list[str]] = defaultdict(list)
        evaluations: Counter[str] = Counter()
        for subject, data in history:
            if subject == subjects.CANDIDATE_CREATED:
                event = search_pb2.CandidateCreated.FromString(data)
                if RETIME_MARKER not in event.candidate_id:
                    created[event.run_id].append(event.candidate_id)
            elif subjects.is_evaluation_finished(subject):
                evaluations[_candidate_of_evaluation(data)] += 1
        dead = []
        for _subject, data in letters:
            letter = run_pb2.DeadLetter.FromString(data)
            dead.append(DeadLetterView(letter.subject, letter.reason, letter.message, letter.service))
        broker = BrokerState(
            created=created, evaluation_events=evaluations, work_messages=work, dead_letters=dead
        )
        runs = {}
        client = LineageClient(self.stack.store_grpc_address)
        try:
            running = [r.run_id for r in await client.list_runs(status="running")]
            for run_id in submitted:
                try:
                    history_response = await client.run_history(run_id)
                except grpc.RpcError:
                    continue
                runs[run_id] = run_lineage(history_response)
        finally:
            await client.close()
        return runs, broker, running


def _candidate_of_evaluation(data: bytes) -> str:
    return evaluation_pb2.EvaluationFinished.FromString(data).candidate_id


async def _read_stream(js: Any, stream: str, subject: str) -> list[tuple[str, bytes]]:
    """Every message of a stream, oldest first, through an ephemeral consumer that acknowledges nothing."""
    info = await js.stream_info(stream)
    total = info.state.messages
    if total == 0:
        return []
    config = ConsumerConfig(deliver_policy=DeliverPolicy.ALL, ack_policy=AckPolicy.NONE)
    sub = await js.pull_subscribe(subject, stream=stream, config=config)
    out: list[tuple[str, bytes]] = []
    try:
        while len(out) < total:
            try:
                msgs = await sub.fetch(min(256, total - len(out)), timeout=5.0)
            except TimeoutError:
                break
            out += [(m.subject, m.data) for m in msgs]
    finally:
        await sub.unsubscribe()
    return out


def _cell(descriptors: Any) -> str:
    return f"{descriptors.memory}/{descriptors.algorithm}/{descriptors.parallelism}"


def run_lineage(history: lineage_pb2.GetRunHistoryResponse) -> RunLineage:
    """The run as the lineage holds it, with its archive replayed the way a resuming evolver does."""
    record = history.run
    summary: dict[str, Any] = json.loads(record.summary_json) if record.summary_json else {}
    # MessageToDict leaves out zeros: a missing axis is level 0
    evolver_archive = {
        "{memory}/{algorithm}/{parallelism}".format(**{**_LEVEL_0, **c.get("descriptors", {})}): c.get(
            "candidate_id", ""
        )
        for c in summary.get("archive", [])
    }
    with TemporaryDirectory(prefix="kf-chaos-replay-") as scratch:
        coordinator = RunCoordinator(Path(scratch))
        replayed = restore_run(coordinator, history)
        rebuilt = {_cell(e.descriptors): e.candidate_id for e in replayed.engine.merged_archive().elites()}
    # a best kernel's re-time is recorded as a candidate of its own, but is no search candidate
    return RunLineage(
        run_id=record.run_id,
        status=record.status,
        candidate_ids=[c.candidate_id for c in history.candidates if RETIME_MARKER not in c.candidate_id],
        evaluated_ids=[e.candidate_id for e in history.evaluations if RETIME_MARKER not in e.candidate_id],
        failed_build_ids=[b.candidate_id for b in history.builds if not b.ok],
        reported_generated=int(summary.get("candidates_generated", 0)),
        reported_resolved=int(summary.get("candidates_correct", 0))
        + int(summary.get("candidates_failed", 0)),
        evolver_archive=evolver_archive,
        rebuilt_archive=rebuilt,
    )


_LEVEL_0 = {"memory": 0, "algorithm": 0, "parallelism": 0}
