"""The SQLite lineage schema: one table per record kind, indexed for every repository query.

Each table keeps the full record as JSON in `doc` and copies into columns only what queries filter,
group or sort by. Timestamps in columns are fixed-width UTC strings, so text order is time order.
`PRAGMA user_version` holds the schema version. Must never be edited in place once released: a change
bumps SCHEMA_VERSION and adds a migration step.
"""

from __future__ import annotations

from datetime import UTC, datetime

STATEMENTS = (
    """CREATE TABLE IF NOT EXISTS runs (
        run_id TEXT PRIMARY KEY, task_name TEXT NOT NULL, status TEXT NOT NULL,
        created_at TEXT NOT NULL, doc TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS runs_by_created ON runs (created_at, run_id)",
    "CREATE INDEX IF NOT EXISTS runs_by_task ON runs (task_name, created_at)",
    """CREATE TABLE IF NOT EXISTS candidates (
        candidate_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, iteration INTEGER NOT NULL,
        created_at TEXT NOT NULL, parent_ids TEXT NOT NULL, doc TEXT NOT NULL)""",
    """CREATE INDEX IF NOT EXISTS candidates_by_run
        ON candidates (run_id, iteration, created_at, candidate_id)""",
    """CREATE TABLE IF NOT EXISTS candidate_parents (
        child_id TEXT NOT NULL, parent_id TEXT NOT NULL, PRIMARY KEY (child_id, parent_id)) WITHOUT ROWID""",
    "CREATE INDEX IF NOT EXISTS candidate_parents_by_parent ON candidate_parents (parent_id, child_id)",
    """CREATE TABLE IF NOT EXISTS builds (
        candidate_id TEXT NOT NULL, target TEXT NOT NULL, run_id TEXT NOT NULL, ok INTEGER NOT NULL,
        reason TEXT NOT NULL, created_at TEXT NOT NULL, blob_expires_at TEXT NOT NULL,
        blob_purged INTEGER NOT NULL, doc TEXT NOT NULL, PRIMARY KEY (candidate_id, target))""",
    "CREATE INDEX IF NOT EXISTS builds_by_run ON builds (run_id, created_at)",
    "CREATE INDEX IF NOT EXISTS builds_by_failure ON builds (ok, reason)",
    "CREATE INDEX IF NOT EXISTS builds_by_expiry ON builds (blob_purged, blob_expires_at)",
    """CREATE TABLE IF NOT EXISTS evaluations (
        candidate_id TEXT NOT NULL, hardware TEXT NOT NULL, run_id TEXT NOT NULL, correct INTEGER NOT NULL,
        reason TEXT NOT NULL, speedup REAL, runtime_ms REAL, evaluated_at TEXT NOT NULL, doc TEXT NOT NULL,
        PRIMARY KEY (candidate_id, hardware))""",
    "CREATE INDEX IF NOT EXISTS evaluations_by_run ON evaluations (run_id, evaluated_at)",
    "CREATE INDEX IF NOT EXISTS evaluations_by_speed ON evaluations (correct, hardware, speedup)",
    "CREATE INDEX IF NOT EXISTS evaluations_by_failure ON evaluations (correct, reason)",
    """CREATE TABLE IF NOT EXISTS snapshots (
        run_id TEXT NOT NULL, iteration INTEGER NOT NULL, candidate_id TEXT NOT NULL, taken_at TEXT NOT NULL,
        doc TEXT NOT NULL, PRIMARY KEY (run_id, iteration, candidate_id))""",
    "CREATE INDEX IF NOT EXISTS snapshots_by_time ON snapshots (run_id, taken_at)",
    """CREATE TABLE IF NOT EXISTS usage (
        usage_id TEXT PRIMARY KEY, run_id TEXT NOT NULL, generator TEXT NOT NULL,
        prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, cost_usd REAL NOT NULL,
        recorded_at TEXT NOT NULL, doc TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS usage_by_run ON usage (run_id, recorded_at)",
    "CREATE INDEX IF NOT EXISTS usage_by_generator ON usage (generator)",
    """CREATE TABLE IF NOT EXISTS events (
        event_id TEXT PRIMARY KEY, kind TEXT NOT NULL, run_id TEXT NOT NULL, recorded_at TEXT NOT NULL,
        doc TEXT NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS events_by_run ON events (run_id, recorded_at)",
)


def column_time(moment: datetime) -> str:
    """A timestamp as fixed-width UTC text (microseconds always written) for ordering and ranges."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
