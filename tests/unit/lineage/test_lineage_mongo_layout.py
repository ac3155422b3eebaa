"""The MongoDB layout: schema_version on every document, an index for every query, version checks."""

from __future__ import annotations

from datetime import UTC, datetime

import bson
import pytest
from mongomock_motor import AsyncMongoMockClient

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
from kernelfoundry.lineage.codec import from_document
from kernelfoundry.lineage.mongo_repository import MongoLineageRepository, _bson
from kernelfoundry.lineage.mongo_schema import KEYS, all_indexes
from kernelfoundry.lineage.repository import SCHEMA_VERSION

AT = datetime(2026, 11, 1, tzinfo=UTC)


async def test_every_document_carries_the_schema_version() -> None:
    database = AsyncMongoMockClient()["kf"]
    repository = await MongoLineageRepository.open(database)
    await repository.save_run(RunRecord(run_id="r", task_name="t", created_at=AT))
    await repository.save_candidate(CandidateRecord(candidate_id="c", run_id="r", created_at=AT))
    await repository.save_build(BuildRecord(candidate_id="c", run_id="r", target="x", ok=True, created_at=AT))
    await repository.save_evaluation(
        EvaluationRecord(candidate_id="c", run_id="r", hardware="h", correct=True, evaluated_at=AT)
    )
    await repository.save_usage(UsageRecord(usage_id="u", run_id="r", generator="g", recorded_at=AT))
    await repository.record_event("e", "k", "r", {}, recorded_at=AT)
    await repository.update_run_status("r", "finished", finished_at=AT)
    for collection in ("runs", "candidates", "builds", "evaluations", "usage", "events"):
        documents = await database[collection].find({}).to_list(None)
        assert documents, collection
        assert all(d["schema_version"] == SCHEMA_VERSION for d in documents), collection


async def test_open_creates_a_unique_key_index_and_the_query_indexes() -> None:
    database = AsyncMongoMockClient()["kf"]
    await MongoLineageRepository.open(database)
    for collection, specs in all_indexes().items():
        info = await database[collection].index_information()
        for name, keys, unique in specs:
            assert name in info, (collection, name)
            assert [tuple(k) for k in info[name]["key"]] == [tuple(k) for k in keys]
            assert bool(info[name].get("unique")) == unique, (collection, name)
        assert info[f"{collection}_key"].get("unique") is True
        assert [k for k, _ in info[f"{collection}_key"]["key"]] == list(KEYS[collection])


async def test_build_documents_carry_their_blob_expiry() -> None:
    database = AsyncMongoMockClient()["kf"]
    repository = await MongoLineageRepository.open(database)
    await repository.save_build(BuildRecord(candidate_id="c", run_id="r", target="x", ok=True, created_at=AT))
    document = await database["builds"].find_one({"candidate_id": "c"})
    assert document["blob_expires_at"].replace(tzinfo=UTC) == AT + repository._retention.blob_ttl


async def test_a_database_from_a_newer_schema_is_refused() -> None:
    database = AsyncMongoMockClient()["kf"]
    await database["meta"].insert_one({"_id": "schema", "schema_version": SCHEMA_VERSION + 1})
    with pytest.raises(LineageError) as caught:
        await MongoLineageRepository.open(database)
    assert caught.value.reason == "schema_too_new"


def test_every_document_is_valid_bson_for_the_real_driver() -> None:
    # mongomock keeps Python objects as they are; PyMongo's encoder is what a real server receives
    records = [
        RunRecord(run_id="r", task_name="t", config={"targets": ["cuda.h200"]}, created_at=AT),
        CandidateRecord(
            candidate_id="c",
            run_id="r",
            parent_ids=("p",),
            params={"B": 64},
            self_reported=Descriptors(1, 2, 3),
            created_at=AT,
        ),
        BuildRecord(
            candidate_id="c", run_id="r", target="x", ok=False, reason="compile_error", created_at=AT
        ),
        EvaluationRecord(
            candidate_id="c", run_id="r", hardware="h", correct=True, speedup=1.5, evaluated_at=AT
        ),
        ArchiveSnapshot(run_id="r", iteration=1, taken_at=AT, cells=({"cell": [0, 1, 2]},)),
        UsageRecord(usage_id="u", run_id="r", generator="g", cost_usd=0.5, recorded_at=AT),
        EventRecord(event_id="e", kind="k", run_id="r", payload={"a": {"b": None}}, recorded_at=AT),
    ]
    for record in records:
        decoded = bson.decode(bson.encode(_bson(record)))
        assert decoded["schema_version"] == SCHEMA_VERSION
        assert from_document(type(record), decoded) == record
