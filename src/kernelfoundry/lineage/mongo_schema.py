"""The MongoDB lineage layout: collection names, the natural key of each, and the indexes every query uses.

Each document is the record's fields (see codec.py) plus `schema_version`; builds also carry
`blob_expires_at`. A unique index on each natural key makes concurrent upserts of the same event safe.
Must never be changed without bumping SCHEMA_VERSION in repository.py.
"""

from __future__ import annotations

ASCENDING = 1
DESCENDING = -1

IndexSpec = tuple[str, list[tuple[str, int]], bool]  # name, keys, unique

KEYS: dict[str, tuple[str, ...]] = {
    "runs": ("run_id",),
    "candidates": ("candidate_id",),
    "builds": ("candidate_id", "target"),
    "evaluations": ("candidate_id", "hardware"),
    "snapshots": ("run_id", "iteration", "candidate_id"),
    "usage": ("usage_id",),
    "events": ("event_id",),
}

INDEXES: dict[str, tuple[IndexSpec, ...]] = {
    "runs": (
        ("runs_by_created", [("created_at", DESCENDING), ("run_id", DESCENDING)], False),
        ("runs_by_task", [("task_name", ASCENDING), ("created_at", DESCENDING)], False),
        ("runs_by_status", [("status", ASCENDING), ("created_at", DESCENDING)], False),
    ),
    "candidates": (
        (
            "candidates_by_run",
            [
                ("run_id", ASCENDING),
                ("iteration", ASCENDING),
                ("created_at", ASCENDING),
                ("candidate_id", ASCENDING),
            ],
            False,
        ),
        ("candidates_by_parent", [("parent_ids", ASCENDING)], False),
    ),
    "builds": (
        ("builds_by_run", [("run_id", ASCENDING), ("created_at", ASCENDING)], False),
        ("builds_by_failure", [("ok", ASCENDING), ("reason", ASCENDING)], False),
        ("builds_by_expiry", [("blob_purged", ASCENDING), ("blob_expires_at", ASCENDING)], False),
    ),
    "evaluations": (
        ("evaluations_by_run", [("run_id", ASCENDING), ("evaluated_at", ASCENDING)], False),
        (
            "evaluations_by_speed",
            [("correct", ASCENDING), ("hardware", ASCENDING), ("speedup", DESCENDING)],
            False,
        ),
        ("evaluations_by_failure", [("correct", ASCENDING), ("reason", ASCENDING)], False),
    ),
    "snapshots": (("snapshots_by_time", [("run_id", ASCENDING), ("taken_at", ASCENDING)], False),),
    "usage": (
        ("usage_by_run", [("run_id", ASCENDING), ("recorded_at", ASCENDING)], False),
        ("usage_by_generator", [("generator", ASCENDING)], False),
    ),
    "events": (("events_by_run", [("run_id", ASCENDING), ("recorded_at", ASCENDING)], False),),
}


def all_indexes() -> dict[str, tuple[IndexSpec, ...]]:
    """Every index per collection, the unique natural-key index first."""
    return {
        name: ((f"{name}_key", [(field, ASCENDING) for field in KEYS[name]], True), *INDEXES[name])
        for name in KEYS
    }
