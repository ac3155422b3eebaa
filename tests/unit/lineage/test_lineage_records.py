"""Records: timestamps normalised to UTC milliseconds, invalid records refused with a reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from kernelfoundry.lineage import CandidateRecord, LineageError, RunRecord


def test_timestamps_become_utc_with_millisecond_precision() -> None:
    local = datetime(2026, 11, 1, 14, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    run = RunRecord(run_id="r", task_name="t", created_at=local)
    assert run.created_at == datetime(2026, 11, 1, 12, 0, 0, 123000, tzinfo=UTC)
    assert run.created_at.tzinfo is UTC


def test_a_naive_timestamp_is_taken_as_utc() -> None:
    run = RunRecord(run_id="r", task_name="t", created_at=datetime(2026, 1, 1, 8, 30))
    assert run.created_at == datetime(2026, 1, 1, 8, 30, tzinfo=UTC)


def test_an_unknown_run_status_is_refused() -> None:
    with pytest.raises(LineageError) as caught:
        RunRecord(run_id="r", task_name="t", status="paused", created_at=datetime.now(UTC))
    assert caught.value.reason == "invalid_record"
    assert "paused" in caught.value.message


def test_an_empty_key_is_refused_naming_the_field() -> None:
    with pytest.raises(LineageError, match=r"CandidateRecord.candidate_id"):
        CandidateRecord(candidate_id="", run_id="r", created_at=datetime.now(UTC))


def test_a_candidate_cannot_be_its_own_parent() -> None:
    with pytest.raises(LineageError, match="c1 lists itself"):
        CandidateRecord(candidate_id="c1", run_id="r", parent_ids=("c1",), created_at=datetime.now(UTC))


def test_parent_ids_given_as_a_list_are_stored_as_a_tuple() -> None:
    record = CandidateRecord(candidate_id="c2", run_id="r", parent_ids=["c1"], created_at=datetime.now(UTC))
    assert record.parent_ids == ("c1",)
