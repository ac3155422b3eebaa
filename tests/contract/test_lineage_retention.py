"""Contract: large blobs are capped on write and purged after expiry; lineage is never dropped."""

from __future__ import annotations

from datetime import timedelta

from lineage_sample import RETENTION, Sample, minutes

from kernelfoundry.lineage import LineageRepository
from kernelfoundry.lineage.retention import PURGED_MARKER


async def test_a_build_log_over_the_cap_is_truncated_with_a_marker(stored: LineageRepository) -> None:
    failed = next(b for b in await stored.builds_of_run("run-a") if b.candidate_id == "c3")
    assert len(failed.log.encode()) <= RETENTION.max_blob_bytes
    assert failed.log.startswith("error: ")
    assert "truncated by the lineage retention policy" in failed.log


async def test_an_evaluation_message_over_the_cap_is_truncated(repository: LineageRepository, sample: Sample):
    from dataclasses import replace

    await repository.save_evaluation(replace(sample.evaluations[2], message="trace\n" * 5000))
    stored = (await repository.evaluations_of_run("run-a"))[0]
    assert len(stored.message.encode()) <= RETENTION.max_blob_bytes
    assert "truncated by the lineage retention policy" in stored.message


async def test_purge_empties_expired_logs_and_hands_back_their_artifacts(
    stored: LineageRepository, sample: Sample
) -> None:
    # builds of run-a are at minutes 1..5; run-b's and run-c's later, so only run-a's have expired
    now = minutes(20) + RETENTION.blob_ttl
    report = await stored.purge_expired_blobs(now)
    assert report.logs_purged == 5
    assert report.artifacts == ("artifacts/c1.so", "artifacts/c2.so", "artifacts/c4.so", "artifacts/c5.so")

    purged = await stored.builds_of_run("run-a")
    assert all(b.log == PURGED_MARKER and b.artifact == "" and b.blob_purged for b in purged)
    assert [(b.ok, b.reason) for b in purged] == [(b.ok, b.reason) for b in sample.builds[:5]]
    kept = await stored.builds_of_run("run-b")
    assert [b.artifact for b in kept] == ["artifacts/b1.so", "artifacts/b2.so"]

    again = await stored.purge_expired_blobs(now + timedelta(seconds=1))
    assert (again.logs_purged, again.artifacts) == (0, ())
    # lineage itself stays whole
    assert len(await stored.candidates_of_run("run-a")) == 5
    assert len(await stored.evaluations_of_run("run-a")) == 5
    assert [c.code for c in await stored.candidates_of_run("run-a")] == [
        c.code for c in sample.candidates if c.run_id == "run-a"
    ]


async def test_nothing_is_purged_before_expiry(stored: LineageRepository) -> None:
    report = await stored.purge_expired_blobs(minutes(0) + RETENTION.blob_ttl)
    assert report.logs_purged == 0
    assert all(b.log != PURGED_MARKER for b in await stored.builds_of_run("run-a"))
