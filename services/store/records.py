"""Mapping of events (protobuf) to lineage records: the store's one translation table.

Every event gets a journal entry keyed by its kind and natural key (candidate id, run id, request id), so
a redelivered or re-published event changes nothing.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message

from kernelfoundry.codec import descriptors_from_proto
from kernelfoundry.domain.tunables import parse_value
from kernelfoundry.generators.accounting import meta_usage_id
from kernelfoundry.lineage.records import (
    ArchiveSnapshot,
    BuildRecord,
    CandidateRecord,
    EvaluationRecord,
    RunRecord,
    UsageRecord,
)
from kernelfoundry.v1 import build_pb2, evaluation_pb2, run_pb2, search_pb2

STATUS_NAMES = {
    run_pb2.RUN_STATUS_RUNNING: "running",
    run_pb2.RUN_STATUS_COMPLETED: "finished",
    run_pb2.RUN_STATUS_CANCELLED: "cancelled",
    run_pb2.RUN_STATUS_FAILED: "failed",
    run_pb2.RUN_STATUS_STOPPED: "stopped",
}


def _at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC) if seconds else datetime.now(UTC)


def event_identity(event: Message) -> tuple[str, str, str]:
    """(event id, kind, run id) for the journal."""
    kind = type(event).__name__
    if isinstance(event, run_pb2.RunSubmitted | run_pb2.RunFinished | run_pb2.RunResumed):
        key = event.run_id
    elif isinstance(event, search_pb2.CandidatesGenerated):
        key = event.request_id
    elif isinstance(event, run_pb2.ArchiveUpdated):
        key = f"{event.candidate_id}"
    else:
        key = getattr(event, "candidate_id", "")
    return f"{kind}:{key}", kind, getattr(event, "run_id", "")


def payload(event: Message) -> dict[str, Any]:
    data = MessageToDict(event, preserving_proto_field_name=True)
    # Sources are stored once, on the candidate record; keep the journal small.
    for bulky in ("task", "source"):
        if bulky in data and isinstance(data[bulky], dict):
            data[bulky] = {k: v for k, v in data[bulky].items() if k in ("name", "language", "entry_point")}
    return data


def run_record(event: run_pb2.RunSubmitted) -> RunRecord:
    config = MessageToDict(event.config, preserving_proto_field_name=True)
    # The full task travels with the run so that a restarted evolver can resume it from the store alone.
    config["task"] = MessageToDict(event.task, preserving_proto_field_name=True)
    return RunRecord(
        run_id=event.run_id,
        task_name=event.task.name,
        task_source=event.task.reference_source,
        config=config,
        hardware=event.config.hardware,
        status="running",
        created_at=_at(event.submitted_at),
    )


def finished_summary(event: run_pb2.RunFinished) -> dict[str, Any]:
    progress = MessageToDict(event.progress, preserving_proto_field_name=True)
    progress.pop("best", None)
    best = event.progress.best
    progress["best_candidate_id"] = best.candidate_id
    progress["best_speedup"] = best.speedup
    return json.loads(json.dumps(progress))


def candidate_record(event: search_pb2.CandidateCreated) -> CandidateRecord:
    source = event.source
    return CandidateRecord(
        candidate_id=event.candidate_id,
        run_id=event.run_id,
        parent_ids=tuple(event.parent_ids),
        iteration=event.iteration,
        generator=event.generator,
        language=source.language,
        code=source.code,
        entry_point=source.entry_point,
        glue=source.glue,
        params={k: parse_value(v) for k, v in source.params.items()},
        self_reported=descriptors_from_proto(event.self_reported)
        if event.HasField("self_reported")
        else None,
        analysed=descriptors_from_proto(event.analysed),
        prompt_variant_id=event.prompt_variant_id,
        mutation=event.mutation,
        island=event.island,
        created_at=datetime.now(UTC),
        repair_of=event.repair_of,
    )


def build_record(event: build_pb2.CandidateCompiled) -> BuildRecord:
    return BuildRecord(
        candidate_id=event.candidate_id,
        run_id=event.run_id,
        target=event.build_target or "unknown",
        ok=event.ok,
        reason=event.reason,
        log=event.log,
        duration_s=event.duration_s,
        artifact=event.artifact,
        cache_hit=event.cache_hit,
        created_at=datetime.now(UTC),
    )


def evaluation_record(event: evaluation_pb2.EvaluationFinished) -> EvaluationRecord:
    details: dict[str, Any] = {}
    if event.details_json:
        try:
            details = json.loads(event.details_json)
        except json.JSONDecodeError:
            details = {"unparsed": event.details_json[:2000]}
    return EvaluationRecord(
        candidate_id=event.candidate_id,
        run_id=event.run_id,
        hardware=event.hardware or "unknown",
        correct=event.correct,
        reason=event.reason,
        message=event.message,
        runtime_ms=event.runtime_ms or None,
        baseline_ms=event.baseline_ms or None,
        compile_baseline_ms=event.compile_baseline_ms or None,
        speedup=event.speedup if event.correct and event.speedup else None,
        max_abs_error=event.max_abs_error if event.correct or event.max_abs_error else None,
        details=details,
        evaluated_at=datetime.now(UTC),
    )


def snapshot_record(event: run_pb2.ArchiveUpdated) -> ArchiveSnapshot:
    cells = tuple(
        {
            **descriptors_from_proto(c.descriptors).as_dict(),
            "candidate_id": c.candidate_id,
            "speedup": c.speedup,
            "runtime_ms": c.runtime_ms,
        }
        for c in event.cells
    )
    return ArchiveSnapshot(
        run_id=event.run_id,
        iteration=event.iteration,
        taken_at=datetime.now(UTC),
        cells=cells,
        candidate_id=event.candidate_id,
        outcome=event.outcome,
    )


def usage_records(event: search_pb2.CandidatesGenerated) -> list[UsageRecord]:
    """What the request cost: the answer's record under the generator that answered, and the
    meta-prompter's rewrite of its guidance, when there was one, as its own record."""
    records = [_usage(event.request_id, event.run_id, event.generator or "unknown", event.usage)]
    if event.meta_generator:
        records.append(
            _usage(meta_usage_id(event.request_id), event.run_id, event.meta_generator, event.meta_usage)
        )
    return records


def _usage(usage_id: str, run_id: str, generator: str, usage: search_pb2.GenerationUsage) -> UsageRecord:
    return UsageRecord(
        usage_id=usage_id,
        run_id=run_id,
        generator=generator,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cost_usd=usage.cost_usd,
        recorded_at=datetime.now(UTC),
    )
