"""What lineage queries answer: small frozen dataclasses built from records, never stored themselves.

Must never import a database driver or transport.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LineageNode:
    """A candidate in a lineage tree; `depth` is the shortest number of parent links from the root."""

    candidate_id: str
    run_id: str
    parent_ids: tuple[str, ...]
    iteration: int
    depth: int


@dataclass(frozen=True)
class LineageTree:
    """Ancestors and descendants of `root`, each ordered by (depth, candidate_id)."""

    root: LineageNode
    ancestors: tuple[LineageNode, ...]
    descendants: tuple[LineageNode, ...]


@dataclass(frozen=True)
class BestKernel:
    """The correct candidate with the highest speedup for one task on one piece of hardware."""

    task_name: str
    hardware: str
    candidate_id: str
    run_id: str
    speedup: float
    runtime_ms: float | None


@dataclass(frozen=True)
class FailureCount:
    """How often one stage (`build` or `evaluation`) failed for one reason."""

    stage: str
    reason: str
    count: int


@dataclass(frozen=True)
class UsageTotal:
    """Token and cost totals for one key: a generator name or a run id, as the query grouped them."""

    key: str
    requests: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float


@dataclass(frozen=True)
class PurgeReport:
    """What `purge_expired_blobs` dropped: how many build logs, and the artifact names to delete."""

    logs_purged: int
    artifacts: tuple[str, ...]
