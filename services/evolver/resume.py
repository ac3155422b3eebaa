"""Resuming runs after an evolver restart, from the lineage the store kept.

The store writes every event; once its durable consumer has caught up with the history, the store's
lineage of a running run is everything the evolver had seen. Each run's archive, transition statistics,
prompt population and counters are rebuilt by replaying its candidates and their results, generation by
generation, into a fresh engine. Work still in flight needs nothing: its messages are durable, request and
candidate ids are deterministic, and every handler ignores what it has already seen.

No stored state stops the evolver from starting: a run that cannot be resumed here (a malformed id or
configuration, hardware without a build target, a generator nothing serves, a record that does not
rebuild) is failed with its reason (a RunFinished the store records), and the others are resumed.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import defaultdict
from collections.abc import Callable

from google.protobuf.json_format import ParseDict

from kernelfoundry.api.ids import is_run_id
from kernelfoundry.bus import subjects
from kernelfoundry.bus.jetstream import Bus, Outgoing
from kernelfoundry.client import LineageClient
from kernelfoundry.codec import task_from_proto
from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.domain.engine import GenerationStarted
from kernelfoundry.domain.evaluation import REPAIR_OPERATOR, CandidateInfo, EvaluationInfo
from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.domain.sweeps import parse_tunables
from kernelfoundry.services.evolver.runs import (
    ALL_SHAPES,
    RETIME_OPERATOR,
    CandidateState,
    RunCoordinator,
    RunState,
    source_digest,
)
from kernelfoundry.tasks.analysis import reference_op_count
from kernelfoundry.tasks.model import TaskError
from kernelfoundry.telemetry.logging import get_logger
from kernelfoundry.v1 import evaluation_pb2, lineage_pb2, run_pb2, task_pb2

log = get_logger(__name__)


async def wait_for_store(bus: Bus, timeout_s: float, clock: Callable[[], float] = time.monotonic) -> bool:
    """True once the store's durable consumer has nothing pending or unacknowledged."""
    deadline = clock() + timeout_s
    while clock() < deadline:
        try:
            info = await bus.js.consumer_info(subjects.EVENTS_STREAM, "store")
        except Exception:  # not created yet: the store has not started
            stream = await bus.js.stream_info(subjects.EVENTS_STREAM)
            if stream.state.messages == 0:
                return True  # a fresh system: no history, nothing to resume
            await asyncio.sleep(0.5)
            continue
        if info.num_pending == 0 and info.num_ack_pending == 0:
            return True
        await asyncio.sleep(0.2)
    return False


def request_of(candidate_id: str) -> str:
    return candidate_id.rsplit("-c", 1)[0]


def _descriptors(message: object) -> Descriptors:
    return Descriptors(message.memory, message.algorithm, message.parallelism)  # type: ignore[attr-defined]


def _shape_timings(details_json: str) -> list[evaluation_pb2.ShapeTiming]:
    """Per-shape timings from the stored evaluation report (its `per_shape` list), if any."""
    try:
        details = json.loads(details_json) if details_json else {}
    except json.JSONDecodeError:
        return []
    shapes = details.get("per_shape") if isinstance(details, dict) else None
    timings = []
    for s in shapes if isinstance(shapes, list) else []:
        if isinstance(s, dict) and isinstance(s.get("shape"), str):
            timings.append(
                evaluation_pb2.ShapeTiming(
                    shape=s["shape"],
                    runtime_ms=float(s.get("runtime_ms") or 0.0),
                    baseline_ms=float(s.get("baseline_ms") or 0.0),
                    compile_baseline_ms=float(s.get("compile_baseline_ms") or 0.0),
                )
            )
    return timings


def _evaluation_event(record: lineage_pb2.EvaluationRecord) -> evaluation_pb2.EvaluationFinished:
    return evaluation_pb2.EvaluationFinished(
        candidate_id=record.candidate_id,
        run_id=record.run_id,
        hardware=record.hardware,
        correct=record.correct,
        reason=record.reason,
        message=record.message,
        runtime_ms=record.runtime_ms,
        baseline_ms=record.baseline_ms,
        compile_baseline_ms=record.compile_baseline_ms,
        speedup=record.speedup,
        max_abs_error=record.max_abs_error,
        shapes=_shape_timings(record.details_json),
    )


def restore_run(coordinator: RunCoordinator, history: lineage_pb2.GetRunHistoryResponse) -> RunState:
    """Rebuild a running run's state from its lineage (without emitting anything)."""
    record = history.run
    config_dict = json.loads(record.config_json or "{}")
    task_proto = ParseDict(config_dict.pop("task", {}), task_pb2.Task())
    config = ParseDict(config_dict, run_pb2.RunConfig(), ignore_unknown_fields=True)
    task = task_from_proto(task_proto)
    run = coordinator.create_run(
        record.run_id,
        task,
        task_proto,
        config,
        coordinator.build_target_for(config.hardware),
        reference_op_count(task.reference_source),
        started_at=record.created_at.ToDatetime().timestamp()
        if record.HasField("created_at")
        else time.time(),
    )
    evaluations = {e.candidate_id: e for e in history.evaluations}
    failed_builds = {b.candidate_id: b for b in history.builds if not b.ok}
    built = {b.candidate_id for b in history.builds if b.ok}
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
            run.engine.apply(GenerationStarted(generation, at, repairs, len(requests)))
            run.generation = generation
        for candidate in members:
            _restore_candidate(run, candidate, evaluations, failed_builds, built)
    return run


def _restore_candidate(
    run: RunState,
    candidate: lineage_pb2.CandidateRecord,
    evaluations: dict[str, lineage_pb2.EvaluationRecord],
    failed_builds: dict[str, lineage_pb2.BuildRecord],
    built: set[str],
) -> None:
    s = candidate.source
    params = {k: int(v) if v.lstrip("-").isdigit() else v for k, v in s.params.items()}
    source = KernelSource(
        language=s.language,  # type: ignore[arg-type]
        code=s.code,
        entry_point=s.entry_point or "kf_forward",
        glue=s.glue,
        tunables=parse_tunables(s.code),
        params=params,
    )
    info = CandidateInfo(
        candidate_id=candidate.candidate_id,
        parent_id=candidate.parent_ids[0] if candidate.parent_ids else None,
        descriptors=_descriptors(candidate.analysed),
        generation=candidate.iteration,
        island=candidate.island,
        operator=candidate.mutation or "seed",
        prompt_variant_id=candidate.prompt_variant_id or None,
        reported=_descriptors(candidate.self_reported) if candidate.HasField("self_reported") else None,
        params=params,
        shape=ALL_SHAPES,
        repair_of=candidate.repair_of or None,
    )
    state = CandidateState(info=info, source=source, created_at=time.time())
    run.candidates[info.candidate_id] = state
    run.source_hashes[source_digest(source)] = info.candidate_id
    run.handled_requests.add(request_of(info.candidate_id))
    run.generated += 1
    evaluation = evaluations.get(info.candidate_id)
    failed_build = failed_builds.get(info.candidate_id)
    if evaluation is not None:
        state.compiled = True
        run.compiled += 1
        result = EvaluationInfo(
            candidate_id=info.candidate_id,
            correct=evaluation.correct,
            speedup=evaluation.speedup if evaluation.correct and evaluation.speedup > 0 else None,
            runtime_s=evaluation.runtime_ms / 1000.0 if evaluation.runtime_ms else None,
            failure_reason=evaluation.reason or None,
            message=evaluation.message,
        )
        RunCoordinator.restore_result(run, state, result, _evaluation_event(evaluation))
    elif failed_build is not None:
        state.compiled = True
        result = EvaluationInfo(
            candidate_id=info.candidate_id,
            correct=False,
            failure_reason=failed_build.reason or "compile_error",
            message=failed_build.log[-4000:],
        )
        RunCoordinator.restore_result(run, state, result, None)
    elif info.candidate_id in built:
        state.compiled = True
        run.compiled += 1


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
    return [failed_at_start(record.run_id, reason, now)]


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
