"""The production lineage backend: MongoDB through PyMongo's native asyncio API.

The repository takes a database object with the call shapes of `pymongo.AsyncMongoClient(uri)[name]`
(motor's successor; motor was deprecated in May 2025). Tests hand it mongomock-motor's in-memory database,
which has the same shapes, so the code keeps to what both provide: `find` / `find_one` / `update_one` /
`create_index` and Python-side grouping; no aggregation pipeline (mongomock lacks `$graphLookup`, and
`aggregate` is awaited in PyMongo's API but not in motor's). Must never import protobuf, NATS or gRPC.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from pymongo.errors import DuplicateKeyError

from kernelfoundry.lineage.codec import from_document, to_document
from kernelfoundry.lineage.errors import LineageError
from kernelfoundry.lineage.mongo_schema import KEYS, all_indexes
from kernelfoundry.lineage.records import (
    ArchiveSnapshot,
    BuildRecord,
    CandidateRecord,
    EvaluationRecord,
    EventRecord,
    RunRecord,
    UsageRecord,
)
from kernelfoundry.lineage.repository import (
    SCHEMA_VERSION,
    LineageRepository,
    UsageGrouping,
    rank_best_kernels,
)
from kernelfoundry.lineage.retention import PURGED_MARKER, RetentionPolicy, cap_blob
from kernelfoundry.lineage.tree import NodeRow, Walk, root_node, walk
from kernelfoundry.lineage.views import (
    BestKernel,
    FailureCount,
    LineageNode,
    LineageTree,
    PurgeReport,
    UsageTotal,
)

R = TypeVar("R")
_IN_CHUNK = 1000  # ids per $in list, far below the 16 MiB command limit
_NO_ID = {"_id": 0}
_NODE_FIELDS = {"_id": 0, "candidate_id": 1, "run_id": 1, "parent_ids": 1, "iteration": 1}


def _naive_utc(value: Any) -> Any:
    """BSON dates carry no zone: send UTC without tzinfo so every driver (and mongomock) compares alike."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None)
    return value


def _bson(record: object, **extra: Any) -> dict[str, Any]:
    document = {name: _naive_utc(value) for name, value in to_document(record).items()}
    document.update({name: _naive_utc(value) for name, value in extra.items()})
    document["schema_version"] = SCHEMA_VERSION
    return document


class MongoLineageRepository(LineageRepository):
    """Lineage in a MongoDB database. Build with `await MongoLineageRepository.open(database)`."""

    def __init__(self, database: Any, retention: RetentionPolicy, client: Any = None) -> None:
        self._db = database
        self._retention = retention
        self._client = client

    @classmethod
    async def open(
        cls, database: Any, *, retention: RetentionPolicy | None = None, client: Any = None
    ) -> MongoLineageRepository:
        """Check the stored schema version and create every index; close() also closes `client`."""
        meta = await database["meta"].find_one({"_id": "schema"})
        if meta is not None and meta.get("schema_version", 0) > SCHEMA_VERSION:
            raise LineageError(
                "schema_too_new",
                f"lineage database has schema {meta['schema_version']}; "
                f"this build reads up to {SCHEMA_VERSION}",
            )
        for collection, indexes in all_indexes().items():
            for name, keys, unique in indexes:
                await database[collection].create_index(keys, name=name, unique=unique)
        await database["meta"].update_one(
            {"_id": "schema"}, {"$max": {"schema_version": SCHEMA_VERSION}}, upsert=True
        )
        return cls(database, retention or RetentionPolicy(), client)

    # ---- writes ----
    async def _insert(self, collection: str, record: object, **extra: Any) -> bool:
        document = _bson(record, **extra)
        key = {field: document[field] for field in KEYS[collection]}
        try:
            result = await self._db[collection].update_one(key, {"$setOnInsert": document}, upsert=True)
        except DuplicateKeyError:  # a concurrent delivery of the same event won the race
            return False
        return result.upserted_id is not None

    async def save_run(self, run: RunRecord) -> bool:
        return await self._insert("runs", run)

    async def update_run_status(
        self,
        run_id: str,
        status: str,
        *,
        finished_at: datetime | None = None,
        summary: dict[str, Any] | None = None,
    ) -> bool:
        current = await self.get_run(run_id)
        if current is None:
            raise LineageError("run_not_found", f"no run {run_id!r} in the lineage store")
        changes: dict[str, Any] = {"status": status}
        if finished_at is not None:
            changes["finished_at"] = finished_at
        if summary is not None:
            changes["summary"] = summary
        updated = replace(current, **changes)
        if updated == current:
            return False
        await self._db["runs"].update_one({"run_id": run_id}, {"$set": _bson(updated)})
        return True

    async def save_candidate(self, candidate: CandidateRecord) -> bool:
        return await self._insert("candidates", candidate)

    async def save_build(self, build: BuildRecord) -> bool:
        build = replace(build, log=cap_blob(build.log, self._retention.max_blob_bytes))
        return await self._insert(
            "builds", build, blob_expires_at=build.created_at + self._retention.blob_ttl
        )

    async def save_evaluation(self, evaluation: EvaluationRecord) -> bool:
        evaluation = replace(evaluation, message=cap_blob(evaluation.message, self._retention.max_blob_bytes))
        return await self._insert("evaluations", evaluation)

    async def save_snapshot(self, snapshot: ArchiveSnapshot) -> bool:
        return await self._insert("snapshots", snapshot)

    async def save_usage(self, usage: UsageRecord) -> bool:
        return await self._insert("usage", usage)

    async def record_event(
        self, event_id: str, kind: str, run_id: str, payload: dict[str, Any], *, recorded_at: datetime
    ) -> bool:
        event = EventRecord(
            event_id=event_id, kind=kind, run_id=run_id, payload=payload, recorded_at=recorded_at
        )
        return await self._insert("events", event)

    # ---- reads ----
    async def _find(
        self,
        cls: type[R],
        collection: str,
        query: dict[str, Any],
        sort: list[tuple[str, int]],
        limit: int | None = None,
    ) -> list[R]:
        cursor = self._db[collection].find(query, _NO_ID).sort(sort)
        if limit is not None:
            cursor = cursor.limit(limit)
        return [from_document(cls, document) for document in await cursor.to_list(None)]

    async def get_run(self, run_id: str) -> RunRecord | None:
        document = await self._db["runs"].find_one({"run_id": run_id}, _NO_ID)
        return None if document is None else from_document(RunRecord, document)

    async def list_runs(
        self, *, task_name: str | None = None, status: str | None = None, limit: int | None = 100
    ) -> list[RunRecord]:
        if limit is not None and limit <= 0:
            return []  # MongoDB reads a limit of 0 as none
        query = {k: v for k, v in {"task_name": task_name, "status": status}.items() if v is not None}
        return await self._find(RunRecord, "runs", query, [("created_at", -1), ("run_id", -1)], limit)

    async def get_candidate(self, candidate_id: str) -> CandidateRecord | None:
        document = await self._db["candidates"].find_one({"candidate_id": candidate_id}, _NO_ID)
        return None if document is None else from_document(CandidateRecord, document)

    async def candidates_of_run(self, run_id: str) -> list[CandidateRecord]:
        order = [("iteration", 1), ("created_at", 1), ("candidate_id", 1)]
        return await self._find(CandidateRecord, "candidates", {"run_id": run_id}, order)

    async def builds_of_run(self, run_id: str) -> list[BuildRecord]:
        order = [("created_at", 1), ("candidate_id", 1), ("target", 1)]
        return await self._find(BuildRecord, "builds", {"run_id": run_id}, order)

    async def evaluations_of_run(self, run_id: str) -> list[EvaluationRecord]:
        order = [("evaluated_at", 1), ("candidate_id", 1), ("hardware", 1)]
        return await self._find(EvaluationRecord, "evaluations", {"run_id": run_id}, order)

    async def _node_rows(self, field: str, ids: list[str]) -> list[NodeRow]:
        rows: list[NodeRow] = []
        for start in range(0, len(ids), _IN_CHUNK):
            chunk = ids[start : start + _IN_CHUNK]
            cursor = self._db["candidates"].find({field: {"$in": chunk}}, _NODE_FIELDS)
            for document in await cursor.to_list(None):
                rows.append(
                    NodeRow(
                        document["candidate_id"],
                        document["run_id"],
                        tuple(document.get("parent_ids") or ()),
                        document["iteration"],
                    )
                )
        return rows

    async def _drive(self, walker: Walk, field: str) -> tuple[LineageNode, ...]:
        try:
            wanted = next(walker)
            while True:
                wanted = walker.send(await self._node_rows(field, wanted))
        except StopIteration as done:
            return done.value

    async def lineage(self, candidate_id: str, *, max_depth: int | None = None) -> LineageTree | None:
        found = await self._node_rows("candidate_id", [candidate_id])
        if not found:
            return None
        root = found[0]
        return LineageTree(
            root=root_node(root),
            ancestors=await self._drive(walk(root, "ancestors", max_depth), "candidate_id"),
            descendants=await self._drive(walk(root, "descendants", max_depth), "parent_ids"),
        )

    async def best_kernels(
        self, *, task_name: str | None = None, hardware: str | None = None
    ) -> list[BestKernel]:
        run_query = {} if task_name is None else {"task_name": task_name}
        runs = await self._db["runs"].find(run_query, {"_id": 0, "run_id": 1, "task_name": 1}).to_list(None)
        task_of = {run["run_id"]: run["task_name"] for run in runs}
        query: dict[str, Any] = {}
        if hardware is not None:
            query["hardware"] = hardware
        if task_name is not None:
            query["run_id"] = {"$in": sorted(task_of)}
        records = await self._find(EvaluationRecord, "evaluations", query, [("evaluated_at", 1)])
        return rank_best_kernels(task_of, records)

    async def snapshots(
        self, run_id: str, *, since: datetime | None = None, until: datetime | None = None
    ) -> list[ArchiveSnapshot]:
        query: dict[str, Any] = {"run_id": run_id}
        taken: dict[str, datetime] = {}
        if since is not None:
            taken["$gte"] = _naive_utc(since)
        if until is not None:
            taken["$lte"] = _naive_utc(until)
        if taken:
            query["taken_at"] = taken
        order = [("iteration", 1), ("taken_at", 1), ("candidate_id", 1)]
        return await self._find(ArchiveSnapshot, "snapshots", query, order)

    async def failures(self, *, run_id: str | None = None) -> list[FailureCount]:
        scope = {} if run_id is None else {"run_id": run_id}
        counts: Counter[tuple[str, str]] = Counter()
        for stage, collection, flag in (("build", "builds", "ok"), ("evaluation", "evaluations", "correct")):
            cursor = self._db[collection].find({**scope, flag: False}, {"_id": 0, "reason": 1})
            for row in await cursor.to_list(None):
                counts[(stage, row.get("reason", ""))] += 1
        ordered = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        return [FailureCount(stage, reason, count) for (stage, reason), count in ordered]

    async def usage_of_run(self, run_id: str) -> list[UsageRecord]:
        return await self._find(
            UsageRecord, "usage", {"run_id": run_id}, [("recorded_at", 1), ("usage_id", 1)]
        )

    async def usage_totals(
        self, *, run_id: str | None = None, group_by: UsageGrouping = "generator"
    ) -> list[UsageTotal]:
        key = {"generator": "generator", "run": "run_id"}[group_by]
        query = {} if run_id is None else {"run_id": run_id}
        fields = {"_id": 0, key: 1, "prompt_tokens": 1, "completion_tokens": 1, "cost_usd": 1}
        sums: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0, 0.0])
        for row in await self._db["usage"].find(query, fields).to_list(None):
            total = sums[row[key]]
            total[0] += 1
            total[1] += row["prompt_tokens"]
            total[2] += row["completion_tokens"]
            total[3] += row["cost_usd"]
        return [
            UsageTotal(name, int(n), int(p), int(c), cost) for name, (n, p, c, cost) in sorted(sums.items())
        ]

    async def events_of_run(self, run_id: str) -> list[EventRecord]:
        return await self._find(
            EventRecord, "events", {"run_id": run_id}, [("recorded_at", 1), ("event_id", 1)]
        )

    # ---- retention ----
    async def purge_expired_blobs(self, now: datetime) -> PurgeReport:
        query = {"blob_purged": False, "blob_expires_at": {"$lte": _naive_utc(now)}}
        fields = {"_id": 0, "candidate_id": 1, "target": 1, "artifact": 1}
        rows = await self._db["builds"].find(query, fields).to_list(None)
        for row in rows:
            await self._db["builds"].update_one(
                {"candidate_id": row["candidate_id"], "target": row["target"]},
                {"$set": {"log": PURGED_MARKER, "artifact": "", "blob_purged": True}},
            )
        artifacts = sorted(row["artifact"] for row in rows if row.get("artifact"))
        return PurgeReport(logs_purged=len(rows), artifacts=tuple(artifacts))

    # ---- lifecycle ----
    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
