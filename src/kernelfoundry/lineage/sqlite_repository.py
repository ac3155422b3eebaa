"""The embedded lineage backend: one SQLite file (WAL mode) driven from one dedicated thread.

The stdlib sqlite3 module blocks, so every call runs on a single-worker thread pool that owns the
connection; the event loop never waits on disk. One writer thread also means no "database is locked"
races inside the process. Other processes may read the file concurrently (WAL). Must never be used as
a shared database by several store processes: that is what the MongoDB backend is for.
"""

from __future__ import annotations

import asyncio
import functools
import json
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from kernelfoundry.lineage.codec import from_document, from_json, to_document, to_json
from kernelfoundry.lineage.errors import LineageError
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
from kernelfoundry.lineage.sqlite_schema import STATEMENTS, column_time
from kernelfoundry.lineage.tree import NodeRow, drive, root_node, walk
from kernelfoundry.lineage.views import (
    BestKernel,
    FailureCount,
    LineageTree,
    PurgeReport,
    UsageTotal,
)

T = TypeVar("T")
R = TypeVar("R")
_IN_CHUNK = 500  # ids per IN (...) list, well under SQLite's bound-parameter limit


def _chunks(ids: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(ids), _IN_CHUNK):
        yield ids[start : start + _IN_CHUNK]


class SqliteLineageRepository(LineageRepository):
    """Lineage in one SQLite file. Build with `await SqliteLineageRepository.open(path)`."""

    def __init__(
        self,
        executor: ThreadPoolExecutor,
        connection: sqlite3.Connection,
        retention: RetentionPolicy,
        path: str,
    ) -> None:
        self._path = path
        self._executor: ThreadPoolExecutor | None = executor
        self._db = connection
        self._retention = retention

    @classmethod
    async def open(
        cls, path: str | Path, *, retention: RetentionPolicy | None = None
    ) -> SqliteLineageRepository:
        """Open (creating if needed) the lineage file at `path`; ":memory:" is a private store."""
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kf-lineage-sqlite")
        loop = asyncio.get_running_loop()
        try:
            connection = await loop.run_in_executor(executor, functools.partial(_connect, str(path)))
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return cls(executor, connection, retention or RetentionPolicy(), str(path))

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._executor is None:
            raise LineageError("repository_closed", f"the lineage repository on {self._path} is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args))

    # ---- writes ----
    def _insert(self, sql: str, values: Sequence[Any]) -> bool:
        return self._db.execute(sql, values).rowcount == 1

    async def save_run(self, run: RunRecord) -> bool:
        return await self._run(
            self._insert,
            "INSERT OR IGNORE INTO runs VALUES (?, ?, ?, ?, ?)",
            (run.run_id, run.task_name, run.status, column_time(run.created_at), to_json(to_document(run))),
        )

    async def update_run_status(
        self,
        run_id: str,
        status: str,
        *,
        finished_at: datetime | None = None,
        summary: dict[str, Any] | None = None,
    ) -> bool:
        def update() -> bool:
            row = self._db.execute("SELECT doc FROM runs WHERE run_id = ?", (run_id,)).fetchone()
            if row is None:
                raise LineageError("run_not_found", f"no run {run_id!r} in the lineage store")
            current = from_document(RunRecord, from_json(row[0]))
            changes: dict[str, Any] = {"status": status}
            if finished_at is not None:
                changes["finished_at"] = finished_at
            if summary is not None:
                changes["summary"] = summary
            updated = replace(current, **changes)
            if updated == current:
                return False
            self._db.execute(
                "UPDATE runs SET status = ?, doc = ? WHERE run_id = ?",
                (updated.status, to_json(to_document(updated)), run_id),
            )
            return True

        return await self._run(update)

    async def save_candidate(self, candidate: CandidateRecord) -> bool:
        def insert() -> bool:
            with _transaction(self._db):
                inserted = self._insert(
                    "INSERT OR IGNORE INTO candidates VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        candidate.candidate_id,
                        candidate.run_id,
                        candidate.iteration,
                        column_time(candidate.created_at),
                        json.dumps(list(candidate.parent_ids)),
                        to_json(to_document(candidate)),
                    ),
                )
                if inserted:
                    self._db.executemany(
                        "INSERT OR IGNORE INTO candidate_parents VALUES (?, ?)",
                        [(candidate.candidate_id, parent) for parent in candidate.parent_ids],
                    )
            return inserted

        return await self._run(insert)

    async def save_build(self, build: BuildRecord) -> bool:
        build = replace(build, log=cap_blob(build.log, self._retention.max_blob_bytes))
        expires = column_time(build.created_at + self._retention.blob_ttl)
        return await self._run(
            self._insert,
            "INSERT OR IGNORE INTO builds VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                build.candidate_id,
                build.target,
                build.run_id,
                int(build.ok),
                build.reason,
                column_time(build.created_at),
                expires,
                int(build.blob_purged),
                to_json(to_document(build)),
            ),
        )

    async def save_evaluation(self, evaluation: EvaluationRecord) -> bool:
        evaluation = replace(evaluation, message=cap_blob(evaluation.message, self._retention.max_blob_bytes))
        return await self._run(
            self._insert,
            "INSERT OR IGNORE INTO evaluations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                evaluation.candidate_id,
                evaluation.hardware,
                evaluation.run_id,
                int(evaluation.correct),
                evaluation.reason,
                evaluation.speedup,
                evaluation.runtime_ms,
                column_time(evaluation.evaluated_at),
                to_json(to_document(evaluation)),
            ),
        )

    async def save_snapshot(self, snapshot: ArchiveSnapshot) -> bool:
        return await self._run(
            self._insert,
            "INSERT OR IGNORE INTO snapshots VALUES (?, ?, ?, ?, ?)",
            (
                snapshot.run_id,
                snapshot.iteration,
                snapshot.candidate_id,
                column_time(snapshot.taken_at),
                to_json(to_document(snapshot)),
            ),
        )

    async def save_usage(self, usage: UsageRecord) -> bool:
        return await self._run(
            self._insert,
            "INSERT OR IGNORE INTO usage VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                usage.usage_id,
                usage.run_id,
                usage.generator,
                usage.prompt_tokens,
                usage.completion_tokens,
                usage.cost_usd,
                column_time(usage.recorded_at),
                to_json(to_document(usage)),
            ),
        )

    async def record_event(
        self, event_id: str, kind: str, run_id: str, payload: dict[str, Any], *, recorded_at: datetime
    ) -> bool:
        event = EventRecord(
            event_id=event_id, kind=kind, run_id=run_id, payload=payload, recorded_at=recorded_at
        )
        return await self._run(
            self._insert,
            "INSERT OR IGNORE INTO events VALUES (?, ?, ?, ?, ?)",
            (
                event.event_id,
                event.kind,
                event.run_id,
                column_time(event.recorded_at),
                to_json(to_document(event)),
            ),
        )

    # ---- reads ----
    def _records(self, cls: type[R], sql: str, values: Sequence[Any] = ()) -> list[R]:
        return [from_document(cls, from_json(row[0])) for row in self._db.execute(sql, values)]

    async def get_run(self, run_id: str) -> RunRecord | None:
        found = await self._run(self._records, RunRecord, "SELECT doc FROM runs WHERE run_id = ?", (run_id,))
        return found[0] if found else None

    async def list_runs(
        self, *, task_name: str | None = None, status: str | None = None, limit: int | None = 100
    ) -> list[RunRecord]:
        where, values = _filters({"task_name": task_name, "status": status})
        sql = f"SELECT doc FROM runs {where} ORDER BY created_at DESC, run_id DESC LIMIT ?"
        bound = -1 if limit is None else max(limit, 0)  # SQLite reads a negative LIMIT as none
        return await self._run(self._records, RunRecord, sql, (*values, bound))

    async def get_candidate(self, candidate_id: str) -> CandidateRecord | None:
        found = await self._run(
            self._records,
            CandidateRecord,
            "SELECT doc FROM candidates WHERE candidate_id = ?",
            (candidate_id,),
        )
        return found[0] if found else None

    async def candidates_of_run(self, run_id: str) -> list[CandidateRecord]:
        sql = "SELECT doc FROM candidates WHERE run_id = ? ORDER BY iteration, created_at, candidate_id"
        return await self._run(self._records, CandidateRecord, sql, (run_id,))

    async def builds_of_run(self, run_id: str) -> list[BuildRecord]:
        sql = "SELECT doc FROM builds WHERE run_id = ? ORDER BY created_at, candidate_id, target"
        return await self._run(self._records, BuildRecord, sql, (run_id,))

    async def evaluations_of_run(self, run_id: str) -> list[EvaluationRecord]:
        sql = "SELECT doc FROM evaluations WHERE run_id = ? ORDER BY evaluated_at, candidate_id, hardware"
        return await self._run(self._records, EvaluationRecord, sql, (run_id,))

    def _node_rows(self, sql: str, ids: Sequence[str]) -> list[NodeRow]:
        rows: list[NodeRow] = []
        for chunk in _chunks(ids):
            marks = ",".join("?" * len(chunk))
            for candidate_id, run_id, parents, iteration in self._db.execute(sql.format(marks=marks), chunk):
                rows.append(NodeRow(candidate_id, run_id, tuple(json.loads(parents)), iteration))
        return rows

    async def lineage(self, candidate_id: str, *, max_depth: int | None = None) -> LineageTree | None:
        columns = "c.candidate_id, c.run_id, c.parent_ids, c.iteration"
        by_id = f"SELECT {columns} FROM candidates c WHERE c.candidate_id IN ({{marks}})"
        children = (
            f"SELECT {columns} FROM candidate_parents p JOIN candidates c ON c.candidate_id = p.child_id "
            "WHERE p.parent_id IN ({marks})"
        )

        def collect() -> LineageTree | None:
            found = self._node_rows(by_id, [candidate_id])
            if not found:
                return None
            root = found[0]
            return LineageTree(
                root=root_node(root),
                ancestors=drive(walk(root, "ancestors", max_depth), lambda ids: self._node_rows(by_id, ids)),
                descendants=drive(
                    walk(root, "descendants", max_depth), lambda ids: self._node_rows(children, ids)
                ),
            )

        return await self._run(collect)

    async def best_kernels(
        self, *, task_name: str | None = None, hardware: str | None = None
    ) -> list[BestKernel]:
        where, values = _filters({"r.task_name": task_name, "e.hardware": hardware})
        sql = (
            "SELECT r.run_id, r.task_name, e.doc FROM evaluations e JOIN runs r ON r.run_id = e.run_id "
            f"{where} ORDER BY e.evaluated_at, e.candidate_id"
        )

        def query() -> list[BestKernel]:
            task_of: dict[str, str] = {}
            records: list[EvaluationRecord] = []
            for run_id, task, doc in self._db.execute(sql, values):
                task_of[run_id] = task
                records.append(from_document(EvaluationRecord, from_json(doc)))
            return rank_best_kernels(task_of, records)

        return await self._run(query)

    async def snapshots(
        self, run_id: str, *, since: datetime | None = None, until: datetime | None = None
    ) -> list[ArchiveSnapshot]:
        sql = "SELECT doc FROM snapshots WHERE run_id = ?"
        values: list[Any] = [run_id]
        if since is not None:
            sql += " AND taken_at >= ?"
            values.append(column_time(since))
        if until is not None:
            sql += " AND taken_at <= ?"
            values.append(column_time(until))
        order = " ORDER BY iteration, taken_at, candidate_id"
        return await self._run(self._records, ArchiveSnapshot, sql + order, values)

    async def failures(self, *, run_id: str | None = None) -> list[FailureCount]:
        run_filter = "AND run_id = ?" if run_id is not None else ""
        values = (run_id, run_id) if run_id is not None else ()
        sql = f"""
            SELECT 'build', reason, COUNT(*) FROM builds WHERE ok = 0 {run_filter} GROUP BY reason
            UNION ALL
            SELECT 'evaluation', reason, COUNT(*) FROM evaluations
            WHERE correct = 0 {run_filter} GROUP BY reason
            ORDER BY 3 DESC, 1, 2"""

        def query() -> list[FailureCount]:
            return [FailureCount(*row) for row in self._db.execute(sql, values)]

        return await self._run(query)

    async def usage_of_run(self, run_id: str) -> list[UsageRecord]:
        sql = "SELECT doc FROM usage WHERE run_id = ? ORDER BY recorded_at, usage_id"
        return await self._run(self._records, UsageRecord, sql, (run_id,))

    async def usage_totals(
        self, *, run_id: str | None = None, group_by: UsageGrouping = "generator"
    ) -> list[UsageTotal]:
        key = {"generator": "generator", "run": "run_id"}[group_by]
        where, values = _filters({"run_id": run_id})
        sql = f"""
            SELECT {key}, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), SUM(cost_usd)
            FROM usage {where} GROUP BY {key} ORDER BY {key}"""

        def query() -> list[UsageTotal]:
            return [UsageTotal(*row) for row in self._db.execute(sql, values)]

        return await self._run(query)

    async def events_of_run(self, run_id: str) -> list[EventRecord]:
        sql = "SELECT doc FROM events WHERE run_id = ? ORDER BY recorded_at, event_id"
        return await self._run(self._records, EventRecord, sql, (run_id,))

    # ---- retention ----
    async def purge_expired_blobs(self, now: datetime) -> PurgeReport:
        def purge() -> PurgeReport:
            artifacts: list[str] = []
            with _transaction(self._db):
                rows = self._db.execute(
                    "SELECT candidate_id, target, doc FROM builds "
                    "WHERE blob_purged = 0 AND blob_expires_at <= ?",
                    (column_time(now),),
                ).fetchall()
                for candidate_id, target, doc in rows:
                    build = from_document(BuildRecord, from_json(doc))
                    if build.artifact:
                        artifacts.append(build.artifact)
                    purged = replace(build, log=PURGED_MARKER, artifact="", blob_purged=True)
                    self._db.execute(
                        "UPDATE builds SET blob_purged = 1, doc = ? WHERE candidate_id = ? AND target = ?",
                        (to_json(to_document(purged)), candidate_id, target),
                    )
            return PurgeReport(logs_purged=len(rows), artifacts=tuple(sorted(artifacts)))

        return await self._run(purge)

    # ---- lifecycle ----
    async def close(self) -> None:
        if self._executor is None:
            return
        executor = self._executor
        await self._run(self._db.close)
        self._executor = None
        executor.shutdown(wait=True)


def _filters(conditions: dict[str, Any]) -> tuple[str, list[Any]]:
    """A WHERE clause (or "") and its values for the conditions that are not None."""
    used = {column: value for column, value in conditions.items() if value is not None}
    if not used:
        return "", []
    return "WHERE " + " AND ".join(f"{column} = ?" for column in used), list(used.values())


@contextmanager
def _transaction(connection: sqlite3.Connection, immediate: bool = False) -> Iterator[None]:
    """One explicit transaction (the connection runs in autocommit mode otherwise). `immediate` takes
    the write lock at BEGIN, waiting for it under the busy timeout: a deferred transaction that reads
    and then writes fails at once with "database is locked" when another connection committed in
    between (WAL snapshot), however long the timeout."""
    connection.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
    try:
        yield
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def _connect(path: str) -> sqlite3.Connection:
    if path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise LineageError(
                "schema_too_new",
                f"lineage file {path} has schema {version}; this build reads up to {SCHEMA_VERSION}",
            )
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA synchronous = NORMAL")
        connection.execute("PRAGMA foreign_keys = OFF")
        connection.execute("PRAGMA busy_timeout = 5000")
        if version < SCHEMA_VERSION:  # a file at the current schema is opened without writing to it
            with _transaction(connection, immediate=True):
                for statement in STATEMENTS:
                    connection.execute(statement)
                connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        connection.close()
        raise
    return connection
