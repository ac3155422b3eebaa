"""Resuming runs after an evolver restart, from the lineage the store kept.

The store writes every event; once its durable consumer has caught up with the history, the store's
lineage of a running run is everything the evolver had seen. Each run's state is rebuilt from its
candidates and their results, generation by generation: the run's own state (candidates, measurements,
counters, best) through the same `RunCoordinator.settle` a live result takes, and the engine's (archive,
transition statistics, prompt population, pending repairs) by the domain's one resume path,
`EvolutionEngine.replay`, from the `GenerationStarted` events and (candidate, evaluation) pairs recorded
on the way; the tokens and cost of its requests from their usage records (each request counted once,
so an answer the evolver had not handled yet adds nothing when it arrives). Work still in flight needs
nothing: its messages are durable, request and candidate ids are deterministic, and every handler
ignores what it has already seen.

No stored state stops the evolver from starting: a run that cannot be resumed here (a malformed id or
configuration, hardware without a build target, a generator nothing serves, a record that does not
rebuild) is failed with its reason (a RunFinished the store records), and the others are resumed.

A `stopped` run (imported unfinished from another deployment) is never resumed on its own: ResumeRun asks
for it (`resume_stopped_run`). Everything is checked before anything changes (the record exists and is
stopped, its configuration within this deployment's limits, its hardware and generator served here, its
task valid on the run's device); then the same restore rebuilds it, a RunResumed event tells the store it
runs again, and work the other deployment had in flight (candidates without a result) is sent again,
since its messages were on another bus.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Protocol

import grpc
from google.protobuf.json_format import ParseDict

from kernelfoundry.api import contract
from kernelfoundry.api.errors import ApiError, not_found, precondition
from kernelfoundry.api.limits import ApiLimits, check_capacity, check_run_size
from kernelfoundry.api.serving import ServingProbe
from kernelfoundry.bus import subjects
from kernelfoundry.bus.protocol import Bus, Outgoing
from kernelfoundry.client import LineageClient
from kernelfoundry.codec import (
    descriptors_from_proto,
    evaluation_from_record,
    kernel_from_proto,
    task_from_proto,
    usage_from_proto,
)
from kernelfoundry.domain.engine import EngineEvent, GenerationStarted
from kernelfoundry.domain.evaluation import REPAIR_OPERATOR, CandidateInfo, EvaluationInfo
from kernelfoundry.domain.kernel import Tunable
from kernelfoundry.domain.results import build_failure
from kernelfoundry.domain.sweeps import ALL_SHAPES
from kernelfoundry.domain.tunables import TunableError, parse_tunables
from kernelfoundry.ids import is_run_id
from kernelfoundry.services.evolver.runs import RunCoordinator
from kernelfoundry.services.evolver.state import RETIME_OPERATOR, CandidateState, RunState, source_digest
from kernelfoundry.tasks.analysis import reference_op_count
from kernelfoundry.tasks.model import Task, TaskError
from kernelfoundry.telemetry.logging import get_logger
from kernelfoundry.v1 import lineage_pb2, run_pb2, task_pb2

log = get_logger(__name__)


async def wait_for_store(bus: Bus, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> bool:
    """True once the store's durable consumer has nothing pending or unacknowledged."""
    deadline = clock() + timeout_s
    while clock() < deadline:
        state = await bus.consumer_state(subjects.EVENTS_STREAM, "store")
        if state is None:  # not created yet: the store has not started
            if await bus.stream_messages(subjects.EVENTS_STREAM) == 0:
                return True  # a fresh system: no history, nothing to resume
            await asyncio.sleep(0.5)
            continue
        if state.pending == 0 and state.ack_pending == 0:
            return True
        await asyncio.sleep(0.2)
    return False


def request_of(candidate_id: str) -> str:
    return candidate_id.rsplit("-c", 1)[0]


def stored_config(record: lineage_pb2.RunRecord) -> tuple[task_pb2.Task, run_pb2.RunConfig]:
    """The task and run configuration a run record keeps (the task travels in its configuration)."""
    config_dict = json.loads(record.config_json or "{}")
    task_proto = ParseDict(config_dict.pop("task", {}), task_pb2.Task())
    config = ParseDict(config_dict, run_pb2.RunConfig(), ignore_unknown_fields=True)
    return task_proto, config


def restore_run(
    coordinator: RunCoordinator,
    history: lineage_pb2.GetRunHistoryResponse,
    started_at: float | None = None,
) -> RunState:
    """Rebuild a running run's state from its lineage (without emitting anything).

    The run's clock (its wall-time budget) starts at its record's creation, or at `started_at`.
    """
    record = history.run
    task_proto, config = stored_config(record)
    task = task_from_proto(task_proto)
    if started_at is None:
        started_at = (
            record.created_at.ToDatetime().timestamp() if record.HasField("created_at") else time.time()
        )
    run = coordinator.create_run(
        record.run_id,
        task,
        config,
        coordinator.build_target_for(config.hardware),
        reference_op_count(task.reference_source),
        started_at=started_at,
    )
    evaluations = {e.candidate_id: e for e in history.evaluations}
    failed_builds = {b.candidate_id: b for b in history.builds if not b.ok}
    built = {b.candidate_id for b in history.builds if b.ok}
    events: list[EngineEvent] = []  # what the engine recorded, in order: the domain's replay rebuilds it
    by_generation: dict[int, list[lineage_pb2.CandidateRecord]] = defaultdict(list)
    for candidate in history.candidates:
        if candidate.mutation == RETIME_OPERATOR:
            continue  # the best kernel's re-time is no search candidate; a resumed run re-times at its end
        by_generation[candidate.iteration].append(candidate)
    for generation in sorted(by_generation):
        members = by_generation[generation]
        if generation > 0:
            requests = {
                request_of(c.candidate_id) for c in members if c.mutation not in ("retune", REPAIR_OPERATOR)
            }
            at = members[0].created_at.ToDatetime().timestamp() if members[0].HasField("created_at") else 0.0
            # a repair child names the failed candidate it repairs: that repair request was handed out
            repairs = tuple(dict.fromkeys(c.repair_of for c in members if c.repair_of))
            events.append(GenerationStarted(generation, at, repairs, len(requests)))
            run.generation = generation
        for candidate in members:
            recorded = _restore_candidate(run, candidate, evaluations, failed_builds, built)
            if recorded is not None:
                events.append(recorded)
    RunCoordinator.replay_engine(run, events)
    for usage in history.usage:  # the tokens and cost of every request answered before the restart
        run.usage.record(usage.usage_id, usage.generator, usage_from_proto(usage))
    return run


def stored_tunables(candidate: lineage_pb2.CandidateRecord) -> tuple[Tunable, ...]:
    """The tunables a stored candidate's code declares; none when a declaration is refused now (the
    grammar may have tightened since it was stored): the candidate is restored without them, its
    results kept, and the reason logged, instead of its run failing to resume."""
    try:
        return parse_tunables(candidate.source.code)
    except TunableError as exc:
        log.warning(
            "stored candidate's tunables refused; restored without them",
            run_id=candidate.run_id,
            candidate_id=candidate.candidate_id,
            reason=exc.reason,
            message=exc.message,
        )
        return ()


def _restore_candidate(
    run: RunState,
    candidate: lineage_pb2.CandidateRecord,
    evaluations: dict[str, lineage_pb2.EvaluationRecord],
    failed_builds: dict[str, lineage_pb2.BuildRecord],
    built: set[str],
) -> tuple[CandidateInfo, EvaluationInfo] | None:
    """Restore one stored candidate into the run's state; returns what the engine is to record of it
    (None while it has no result)."""
    # the lineage keeps no declaration list: a stored kernel's tunables are read from its code
    source = replace(kernel_from_proto(candidate.source), tunables=stored_tunables(candidate))
    params = dict(source.params)
    info = CandidateInfo(
        candidate_id=candidate.candidate_id,
        parent_id=candidate.parent_ids[0] if candidate.parent_ids else None,
        descriptors=descriptors_from_proto(candidate.analysed),
        generation=candidate.iteration,
        island=candidate.island,
        operator=candidate.mutation or "seed",
        prompt_variant_id=candidate.prompt_variant_id or None,
        reported=descriptors_from_proto(candidate.self_reported)
        if candidate.HasField("self_reported")
        else None,
        params=params,
        shape=ALL_SHAPES,
        repair_of=candidate.repair_of or None,
    )
    state = CandidateState(info=info, source=source, created_at=time.time(), generator=candidate.generator)
    run.candidates[info.candidate_id] = state
    run.source_hashes[source_digest(source)] = info.candidate_id
    run.handled_requests.add(request_of(info.candidate_id))
    run.generated += 1
    evaluation = evaluations.get(info.candidate_id)
    failed_build = failed_builds.get(info.candidate_id)
    if evaluation is not None:
        state.compiled = True
        run.compiled += 1
        result = evaluation_from_record(evaluation)
        return info, RunCoordinator.settle(run, state, result.info(), result)
    if failed_build is not None:
        state.compiled = True
        failure = build_failure(info.candidate_id, failed_build.reason, failed_build.log)
        return info, RunCoordinator.settle(run, state, failure, None)
    if info.candidate_id in built:
        state.compiled = True
        run.compiled += 1
    return None


def unresumable_reason(
    coordinator: RunCoordinator, record: lineage_pb2.RunRecord, generator_served: Callable[[str], bool]
) -> str | None:
    """Why a stored run cannot be resumed here (`reason: message`), or None when it can be tried."""
    if not is_run_id(record.run_id):
        return f"corrupt_record: {record.run_id[:64]!r} is not a run id"
    try:
        config = json.loads(record.config_json or "{}")
    except json.JSONDecodeError:
        return "corrupt_record: the stored configuration is not JSON"
    if not isinstance(config, dict):
        return "corrupt_record: the stored configuration is not a JSON object"
    hardware = config.get("hardware", "")
    try:
        coordinator.build_target_for(str(hardware))
    except TaskError as exc:
        return f"{exc.reason}: {exc.message}"
    generator = str(config.get("generator", ""))
    if not generator_served(generator):
        return f"unserved_generator: no llm service or configured pool serves generator {generator!r}"
    return None


def failed_at_start(run_id: str, reason: str, now: float) -> Outgoing:
    """The ending of a run that cannot be resumed: failed, with its reason, recorded by the store."""
    progress = run_pb2.RunProgress(run_id=run_id, status=run_pb2.RUN_STATUS_FAILED, message=reason)
    finished = run_pb2.RunFinished(
        run_id=run_id, status=run_pb2.RUN_STATUS_FAILED, progress=progress, finished_at=now
    )
    return Outgoing(subjects.RUN_FINISHED, finished, f"finished-{run_id}")


def resume_or_fail(
    coordinator: RunCoordinator,
    history: lineage_pb2.GetRunHistoryResponse,
    generator_served: Callable[[str], bool],
    now: float,
) -> list[Outgoing]:
    """Restore one stored running run and move it on; a run that cannot be restored is failed with its
    reason instead, so that no stored state stops the evolver from starting."""
    record = history.run
    reason = unresumable_reason(coordinator, record, generator_served)
    if reason is None:
        try:
            run = restore_run(coordinator, history)
            out = coordinator.continue_run(run)
        except Exception as exc:  # a corrupt record of any kind: this run fails, the others go on
            coordinator.runs.pop(record.run_id, None)
            reason = f"corrupt_record: the stored run could not be rebuilt ({type(exc).__name__})"
        else:
            log.info(
                "run resumed",
                run_id=run.run_id,
                generation=run.generation,
                candidates=len(run.candidates),
                unresolved=run.unresolved(),
            )
            return out
    log.warning("run cannot be resumed; failing it", run_id=record.run_id, reason=reason)
    ending = failed_at_start(record.run_id, reason, now)
    coordinator.record_ending(ending.message)  # type: ignore[arg-type]
    return [ending]


async def resume_runs(
    coordinator: RunCoordinator,
    bus: Bus,
    store_address: str,
    wait_s: float = 60.0,
    generators: frozenset[str] | None = None,
) -> list[Outgoing]:
    """Restore every run the store lists as running; returns the messages that move them on, and the
    endings of the runs that cannot be resumed (`generators`: the names served here; None: any)."""
    if not await wait_for_store(bus, wait_s):
        log.warning("the store has not caught up with the event history; resuming from what it has")
    client = LineageClient(store_address)
    out: list[Outgoing] = []

    def generator_served(name: str) -> bool:
        return generators is None or name in generators

    try:
        if not await client.ready(wait_s):
            log.warning("no lineage API answers; runs in progress cannot be resumed", address=store_address)
            return []
        for record in await client.list_runs(status="running"):
            if record.run_id in coordinator.runs:
                continue
            if not is_run_id(record.run_id):  # never sent back to the store as a key
                log.warning("a stored run id is not a run id; skipped", run_id=record.run_id[:64])
                continue
            history = await client.run_history(record.run_id)
            out += resume_or_fail(coordinator, history, generator_served, time.time())
    finally:
        await client.close()
    return out


# -- ResumeRun: a stopped run, on a user's request ---------------------------------------------------------


class StoredRuns(Protocol):
    """What resuming reads of the lineage (kernelfoundry.client.LineageClient has both)."""

    async def get_run(self, run_id: str, timeout_s: float | None = None) -> lineage_pb2.RunRecord: ...

    async def run_history(self, run_id: str) -> lineage_pb2.GetRunHistoryResponse: ...


TaskCheck = Callable[[Task, str], Awaitable[None]]  # (task, hardware): raises TaskError when invalid there


def elapsed_before_stop(history: lineage_pb2.GetRunHistoryResponse) -> float:
    """How long the run had run where it stopped: from its creation to the last thing it recorded."""
    record = history.run
    if not record.HasField("created_at"):
        return 0.0
    start = record.created_at.ToDatetime().timestamp()
    moments = [c.created_at.ToDatetime().timestamp() for c in history.candidates if c.HasField("created_at")]
    moments += [
        e.evaluated_at.ToDatetime().timestamp() for e in history.evaluations if e.HasField("evaluated_at")
    ]
    return max([0.0, *(m - start for m in moments)])


async def check_resumable(
    coordinator: RunCoordinator,
    record: lineage_pb2.RunRecord,
    probe: ServingProbe,
    limits: ApiLimits,
    check_task: TaskCheck,
) -> None:
    """Raise ApiError (FAILED_PRECONDITION naming why) unless the stored run can be resumed here."""
    run_id = record.run_id
    if run_id in coordinator.runs:
        raise precondition("run_running", f"run {run_id} is already running here")
    if record.status != "stopped":
        raise precondition(
            "run_not_stopped",
            f"run {run_id} is {record.status or 'of no status'}; only a stopped run (imported unfinished) "
            "can be resumed",
        )
    served = await probe.served()
    reason = unresumable_reason(coordinator, record, lambda name: name in served.generators)
    if reason is not None:
        code, _, message = reason.partition(": ")
        raise precondition(code, f"run {run_id} cannot be resumed here: {message}")
    try:
        task_proto, config = stored_config(record)
    except Exception as exc:  # ParseError, ValueError, ...: a record no submission could have made
        raise precondition("corrupt_record", f"run {run_id}'s stored configuration does not parse") from exc
    if config.hardware not in served.hardware:
        raise precondition(
            "unserved_hardware",
            f"run {run_id} runs on {config.hardware!r}, which no executor or configured pool serves here"
            f" (served: {', '.join(sorted(served.hardware)) or 'none'})",
        )
    broken = contract.violations(task_proto)
    if broken:
        raise precondition("invalid_task", f"run {run_id}'s stored task breaks the contract: {broken[0]}")
    try:
        check_run_size(
            limits,
            islands=config.islands,
            population=config.population,
            iterations=config.iterations,
            budget_iterations=task_proto.budget.iterations,
        )
    except ApiError as exc:
        raise precondition(exc.reason, f"run {run_id}: {exc.message}") from exc
    check_capacity(limits, coordinator.active_count())
    try:
        task = task_from_proto(task_proto)
        if not task.reference_source.strip():
            raise TaskError("empty_task", "the stored task has no reference source")
        await check_task(task, config.hardware)
    except TaskError as exc:
        raise precondition(
            "invalid_task", f"run {run_id}'s stored task does not validate here: {exc.reason}: {exc.message}"
        ) from exc
    except ValueError as exc:  # a kernel or shape in the stored task that does not parse
        raise precondition("invalid_task", f"run {run_id}'s stored task does not parse") from exc


def resume_stopped(
    coordinator: RunCoordinator, history: lineage_pb2.GetRunHistoryResponse, now: float
) -> list[Outgoing]:
    """Rebuild a checked stopped run and move it on: RunResumed first (the store marks it running), then
    its unfinished candidates sent again, or its next generation. Raises ApiError for a record that does
    not rebuild, and then nothing has changed."""
    run_id = history.run.run_id
    if run_id in coordinator.runs:  # a second ResumeRun overtook this one while the history was read
        raise precondition("run_running", f"run {run_id} is already running here")
    try:
        run = restore_run(coordinator, history, started_at=now - elapsed_before_stop(history))
    except Exception as exc:  # a corrupt record of any kind: refused, nothing kept
        coordinator.runs.pop(run_id, None)
        log.warning("a stopped run's lineage does not rebuild", run_id=run_id, error=type(exc).__name__)
        raise precondition("corrupt_record", f"run {run_id}'s stored lineage could not be rebuilt") from exc
    resumed = run_pb2.RunResumed(run_id=run_id, resumed_at=now, generation=run.generation)
    out = [Outgoing(subjects.RUN_RESUMED, resumed, f"resumed-{run_id}")]
    out += coordinator.redispatch(run)
    out += coordinator.continue_run(run)
    log.info(
        "stopped run resumed",
        run_id=run_id,
        generation=run.generation,
        candidates=len(run.candidates),
        resent=run.unresolved(),
    )
    return out


async def resume_stopped_run(
    coordinator: RunCoordinator,
    run_id: str,
    lineage: StoredRuns,
    probe: ServingProbe,
    limits: ApiLimits,
    check_task: TaskCheck,
    now: Callable[[], float] = time.time,
) -> list[Outgoing]:
    """ResumeRun: every check, then the resume; returns the messages to publish. Raises ApiError:
    NOT_FOUND for a run the lineage does not hold, FAILED_PRECONDITION naming why it cannot be resumed,
    RESOURCE_EXHAUSTED when the evolver runs its maximum."""
    try:
        record = await lineage.get_run(run_id, timeout_s=30.0)
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.NOT_FOUND:  # type: ignore[attr-defined]
            raise not_found("run_not_found", f"no run {run_id!r} in the lineage") from exc
        raise ApiError(
            grpc.StatusCode.UNAVAILABLE, "store_unavailable", "the lineage store did not answer; retry"
        ) from exc
    await check_resumable(coordinator, record, probe, limits, check_task)
    history = await lineage.run_history(run_id)
    if history.run.status != "stopped":  # changed while the task was checked
        raise precondition(
            "run_not_stopped", f"run {run_id} is {history.run.status}; it is no longer stopped"
        )
    return resume_stopped(coordinator, history, now())
