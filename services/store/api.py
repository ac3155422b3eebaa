"""The lineage query API (LineageService), served by the store over gRPC.

A thin adapter: each RPC calls one repository query and maps its records to messages. Every request has
passed the edge (kernelfoundry.api: decoding, the declared contract, ImportRun's size) before it gets
here. Unknown runs and candidates are NOT_FOUND; malformed requests and archives are INVALID_ARGUMENT with
the repository's reason. Export and import work on bytes in memory: no request names a path here.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from kernelfoundry.api.errors import api_error_of
from kernelfoundry.api.limits import ApiLimits
from kernelfoundry.codec import descriptors_to_proto
from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.lineage import records as rec
from kernelfoundry.lineage.errors import LineageError
from kernelfoundry.lineage.export import export_run_bytes, import_run_bytes
from kernelfoundry.lineage.repository import LineageRepository
from kernelfoundry.lineage.views import LineageNode
from kernelfoundry.v1 import kernel_pb2, lineage_pb2, lineage_pb2_grpc, run_pb2


def _ts(moment: datetime | None) -> Timestamp | None:
    if moment is None:
        return None
    stamp = Timestamp()
    stamp.FromDatetime(moment)
    return stamp


def _descriptors(d: Descriptors | None) -> kernel_pb2.Descriptors | None:
    return None if d is None else descriptors_to_proto(d)


def run_message(run: rec.RunRecord) -> lineage_pb2.RunRecord:
    return lineage_pb2.RunRecord(
        run_id=run.run_id,
        task_name=run.task_name,
        task_source=run.task_source,
        config_json=json.dumps(run.config),
        hardware=run.hardware,
        status=run.status,
        created_at=_ts(run.created_at),
        finished_at=_ts(run.finished_at),
        summary_json=json.dumps(run.summary),
    )


def candidate_message(c: rec.CandidateRecord) -> lineage_pb2.CandidateRecord:
    return lineage_pb2.CandidateRecord(
        candidate_id=c.candidate_id,
        run_id=c.run_id,
        parent_ids=list(c.parent_ids),
        iteration=c.iteration,
        generator=c.generator,
        source=kernel_pb2.KernelSource(
            language=c.language,
            code=c.code,
            entry_point=c.entry_point,
            glue=c.glue,
            params={k: str(v) for k, v in c.params.items()},
        ),
        self_reported=_descriptors(c.self_reported),
        analysed=_descriptors(c.analysed),
        prompt_variant_id=c.prompt_variant_id,
        mutation=c.mutation,
        island=c.island,
        created_at=_ts(c.created_at),
        repair_of=c.repair_of,
    )


def build_message(b: rec.BuildRecord) -> lineage_pb2.BuildRecord:
    return lineage_pb2.BuildRecord(
        candidate_id=b.candidate_id,
        run_id=b.run_id,
        target=b.target,
        ok=b.ok,
        reason=b.reason,
        log=b.log,
        duration_s=b.duration_s,
        artifact=b.artifact,
        cache_hit=b.cache_hit,
    )


def usage_message(u: rec.UsageRecord) -> lineage_pb2.UsageRecord:
    return lineage_pb2.UsageRecord(
        usage_id=u.usage_id,
        run_id=u.run_id,
        generator=u.generator,
        prompt_tokens=u.prompt_tokens,
        completion_tokens=u.completion_tokens,
        cost_usd=u.cost_usd,
        recorded_at=_ts(u.recorded_at),
    )


def evaluation_message(e: rec.EvaluationRecord) -> lineage_pb2.EvaluationRecord:
    return lineage_pb2.EvaluationRecord(
        candidate_id=e.candidate_id,
        run_id=e.run_id,
        hardware=e.hardware,
        correct=e.correct,
        reason=e.reason,
        message=e.message,
        runtime_ms=e.runtime_ms or 0.0,
        baseline_ms=e.baseline_ms or 0.0,
        compile_baseline_ms=e.compile_baseline_ms or 0.0,
        speedup=e.speedup or 0.0,
        max_abs_error=e.max_abs_error or 0.0,
        details_json=json.dumps(e.details),
        evaluated_at=_ts(e.evaluated_at),
    )


def node_message(n: LineageNode) -> lineage_pb2.LineageNode:
    return lineage_pb2.LineageNode(
        candidate_id=n.candidate_id,
        run_id=n.run_id,
        parent_ids=list(n.parent_ids),
        iteration=n.iteration,
        depth=n.depth,
    )


def _cell(cell: dict[str, Any]) -> run_pb2.ArchiveCell:
    return run_pb2.ArchiveCell(
        descriptors=descriptors_to_proto(Descriptors.from_levels(cell, missing=0)),
        candidate_id=str(cell.get("candidate_id", "")),
        speedup=float(cell.get("speedup") or 0.0),
        runtime_ms=float(cell.get("runtime_ms") or 0.0),
    )


class LineageApi(lineage_pb2_grpc.LineageServiceServicer):
    def __init__(self, repository: LineageRepository, limits: ApiLimits | None = None) -> None:
        self.repository = repository
        self.limits = limits or ApiLimits()

    async def _run_or_abort(self, run_id: str, context: Any) -> rec.RunRecord:
        run = await self.repository.get_run(run_id)
        if run is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no run {run_id!r} in the lineage store")
        assert run is not None
        return run

    async def GetRunRecord(self, request, context):  # type: ignore[no-untyped-def]
        return lineage_pb2.GetRunRecordResponse(
            run=run_message(await self._run_or_abort(request.run_id, context))
        )

    async def ListRuns(self, request, context):  # type: ignore[no-untyped-def]
        runs = await self.repository.list_runs(
            task_name=request.task_name or None, status=request.status or None, limit=request.limit or None
        )
        return lineage_pb2.ListRunsResponse(runs=[run_message(r) for r in runs])

    async def GetRunHistory(self, request, context):  # type: ignore[no-untyped-def]
        run = await self._run_or_abort(request.run_id, context)
        repo = self.repository
        return lineage_pb2.GetRunHistoryResponse(
            run=run_message(run),
            candidates=[candidate_message(c) for c in await repo.candidates_of_run(run.run_id)],
            builds=[build_message(b) for b in await repo.builds_of_run(run.run_id)],
            evaluations=[evaluation_message(e) for e in await repo.evaluations_of_run(run.run_id)],
            usage=[usage_message(u) for u in await repo.usage_of_run(run.run_id)],
        )

    async def GetLineageTree(self, request, context):  # type: ignore[no-untyped-def]
        tree = await self.repository.lineage(request.candidate_id, max_depth=request.max_depth or None)
        if tree is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no candidate {request.candidate_id!r}")
        assert tree is not None
        return lineage_pb2.GetLineageTreeResponse(
            root=node_message(tree.root),
            ancestors=[node_message(n) for n in tree.ancestors],
            descendants=[node_message(n) for n in tree.descendants],
        )

    async def GetBestKernels(self, request, context):  # type: ignore[no-untyped-def]
        kernels = await self.repository.best_kernels(
            task_name=request.task_name or None, hardware=request.hardware or None
        )
        return lineage_pb2.GetBestKernelsResponse(
            kernels=[
                lineage_pb2.BestKernelRecord(
                    task_name=k.task_name,
                    hardware=k.hardware,
                    candidate_id=k.candidate_id,
                    run_id=k.run_id,
                    speedup=k.speedup,
                    runtime_ms=k.runtime_ms or 0.0,
                )
                for k in kernels
            ]
        )

    async def GetArchiveSnapshots(self, request, context):  # type: ignore[no-untyped-def]
        snapshots = await self.repository.snapshots(request.run_id)
        return lineage_pb2.GetArchiveSnapshotsResponse(
            snapshots=[
                lineage_pb2.ArchiveSnapshotRecord(
                    run_id=s.run_id,
                    iteration=s.iteration,
                    taken_at=_ts(s.taken_at),
                    cells=[_cell(c) for c in s.cells],
                )
                for s in snapshots
            ]
        )

    async def GetFailureSummary(self, request, context):  # type: ignore[no-untyped-def]
        failures = await self.repository.failures(run_id=request.run_id or None)
        return lineage_pb2.GetFailureSummaryResponse(
            failures=[
                lineage_pb2.FailureCount(stage=f.stage, reason=f.reason, count=f.count) for f in failures
            ]
        )

    async def GetUsageTotals(self, request, context):  # type: ignore[no-untyped-def]
        group_by = request.group_by or "generator"
        if group_by not in ("generator", "run"):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"group_by must be generator or run, not {group_by!r}"
            )
        totals = await self.repository.usage_totals(run_id=request.run_id or None, group_by=group_by)  # type: ignore[arg-type]
        return lineage_pb2.GetUsageTotalsResponse(
            totals=[
                lineage_pb2.UsageTotal(
                    key=t.key,
                    requests=t.requests,
                    prompt_tokens=t.prompt_tokens,
                    completion_tokens=t.completion_tokens,
                    cost_usd=t.cost_usd,
                )
                for t in totals
            ]
        )

    async def ExportRun(self, request, context):  # type: ignore[no-untyped-def]
        # Built in memory: the run id (checked by the edge's contract) names the file the client saves,
        # never a path here.
        await self._run_or_abort(request.run_id, context)
        data, _counts = await export_run_bytes(self.repository, request.run_id)
        return lineage_pb2.ExportRunResponse(archive=data, file_name=f"{request.run_id}.kfrun.tar.gz")

    async def ImportRun(self, request, context):  # type: ignore[no-untyped-def]
        try:
            report = await import_run_bytes(
                self.repository, request.archive, max_decompressed=self.limits.max_decompressed_bytes
            )
        except LineageError as exc:  # corrupt, invalid or too large an archive: its status, its reason
            error = api_error_of(exc)
            assert error is not None
            await context.abort(error.code, str(error))
            raise
        return lineage_pb2.ImportRunResponse(
            run_id=report.run_id,
            candidates=report.inserted.get("candidates", 0),
            evaluations=report.inserted.get("evaluations", 0),
        )
