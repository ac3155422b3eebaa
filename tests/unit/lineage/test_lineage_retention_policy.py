"""Capping blobs: short text is kept, long text keeps its head and tail around a marker."""

from __future__ import annotations

import pytest

from kernelfoundry.lineage.retention import RetentionPolicy, cap_blob


def test_text_within_the_cap_is_kept_unchanged() -> None:
    assert cap_blob("short log", 1024) == "short log"


def test_long_text_keeps_head_and_tail_within_the_cap() -> None:
    text = "FIRST ERROR\n" + "noise\n" * 10_000 + "LAST LINE"
    capped = cap_blob(text, 1024)
    assert len(capped.encode()) <= 1024
    assert capped.startswith("FIRST ERROR")
    assert capped.endswith("LAST LINE")
    assert "bytes truncated by the lineage retention policy" in capped


def test_marker_counts_the_dropped_bytes() -> None:
    text = "x" * 5000
    capped = cap_blob(text, 1000)
    kept = capped.count("x")
    assert f"[... {5000 - kept} bytes truncated" in capped


def test_cutting_never_splits_a_multibyte_character() -> None:
    capped = cap_blob("é" * 3000, 1001)  # two bytes each: an odd cap falls inside one
    assert len(capped.encode()) <= 1001
    assert capped.startswith("é") and capped.endswith("é")


def test_a_cap_too_small_for_the_marker_is_refused() -> None:
    with pytest.raises(ValueError, match="max_blob_bytes=10"):
        RetentionPolicy(max_blob_bytes=10)
