"""The codec: every record survives to_document/from_document and JSON unchanged."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.lineage import (
    ArchiveSnapshot,
    BuildRecord,
    CandidateRecord,
    EvaluationRecord,
    EventRecord,
    LineageError,
    RunRecord,
    UsageRecord,
)
from kernelfoundry.lineage.codec import from_document, from_json, to_document, to_json

AT = datetime(2026, 11, 29, 10, 0, 0, 5000, tzinfo=UTC)
RECORDS = [
    RunRecord(
        run_id="r", task_name="t", config={"a": [1, 2]}, created_at=AT, finished_at=AT, status="finished"
    ),
    CandidateRecord(
        candidate_id="c",
        run_id="r",
        parent_ids=("p1", "p2"),
        code="int main(){}",
        params={"B": 64, "L": "row"},
        self_reported=Descriptors(1, 2, 3),
        analysed=None,
        created_at=AT,
    ),
    BuildRecord(candidate_id="c", run_id="r", target="cpu.x86_64", ok=True, log="ok", created_at=AT),
    EvaluationRecord(
        candidate_id="c", run_id="r", hardware="h200", correct=True, speedup=1.5, evaluated_at=AT
    ),
    ArchiveSnapshot(run_id="r", iteration=2, taken_at=AT, cells=({"cell": [0, 1, 2]},)),
    UsageRecord(usage_id="u", run_id="r", generator="g", prompt_tokens=3, cost_usd=0.01, recorded_at=AT),
    EventRecord(event_id="e", kind="k", run_id="r", payload={"x": {"y": None}}, recorded_at=AT),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_record_round_trips_through_a_document_and_json(record: object) -> None:
    document = to_document(record)
    assert from_document(type(record), document) == record
    assert from_document(type(record), from_json(to_json(document))) == record


def test_descriptors_become_named_levels() -> None:
    document = to_document(RECORDS[1])
    assert document["self_reported"] == {"memory": 1, "algorithm": 2, "parallelism": 3}
    assert document["parent_ids"] == ["p1", "p2"]


def test_backend_fields_in_a_document_are_ignored() -> None:
    document = {**to_document(RECORDS[0]), "_id": "x", "schema_version": 1, "blob_expires_at": AT}
    assert from_document(RunRecord, document) == RECORDS[0]


def test_a_document_missing_a_required_field_is_an_invalid_record() -> None:
    with pytest.raises(LineageError) as caught:
        from_document(RunRecord, {"run_id": "r", "task_name": "t"})
    assert caught.value.reason == "invalid_record"
    assert "RunRecord" in caught.value.message
