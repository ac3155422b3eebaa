"""Lineage: everything a run did, kept so it can be resumed, audited, compared and moved.

One async repository interface (`LineageRepository`) with two backends chosen by URI through
`open_repository`: SQLite (embedded default) and MongoDB (production, PyMongo's asyncio client).
This package must never import protobuf, NATS or gRPC; the store service maps messages onto the records.
"""

from kernelfoundry.lineage.connection import open_repository
from kernelfoundry.lineage.errors import LineageError
from kernelfoundry.lineage.export import ImportReport, export_run, import_run
from kernelfoundry.lineage.records import (
    ArchiveSnapshot,
    BuildRecord,
    CandidateRecord,
    EvaluationRecord,
    EventRecord,
    RunRecord,
    UsageRecord,
)
from kernelfoundry.lineage.repository import SCHEMA_VERSION, LineageRepository
from kernelfoundry.lineage.retention import RetentionPolicy
from kernelfoundry.lineage.views import (
    BestKernel,
    FailureCount,
    LineageNode,
    LineageTree,
    PurgeReport,
    UsageTotal,
)

__all__ = [
    "SCHEMA_VERSION",
    "ArchiveSnapshot",
    "BestKernel",
    "BuildRecord",
    "CandidateRecord",
    "EvaluationRecord",
    "EventRecord",
    "FailureCount",
    "ImportReport",
    "LineageError",
    "LineageNode",
    "LineageRepository",
    "LineageTree",
    "PurgeReport",
    "RetentionPolicy",
    "RunRecord",
    "UsageRecord",
    "UsageTotal",
    "export_run",
    "import_run",
    "open_repository",
]
