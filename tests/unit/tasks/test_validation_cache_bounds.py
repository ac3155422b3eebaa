"""The validation cache folder is bounded: least recently used summaries leave first."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from kernelfoundry.tasks.cache_bounds import STALE_PARTIAL_S, CacheBounds, prune, touch
from kernelfoundry.tasks.model import Task
from kernelfoundry.tasks.summary import TaskSummary
from kernelfoundry.tasks.validation import cache_key, validate_task

SOURCE = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x\n# {}\n"


def entry(folder: Path, name: str, size: int, age_s: float) -> Path:
    path = folder / f"{name}.json"
    path.write_bytes(b"x" * size)
    moment = time.time() - age_s
    os.utime(path, (moment, moment))
    return path


def test_the_least_recently_used_entries_leave_until_the_count_holds(tmp_path: Path) -> None:
    paths = [entry(tmp_path, f"e{i}", 10, age_s=100 - i) for i in range(6)]  # e0 oldest
    touch(paths[0])  # used just now: the last to leave
    assert prune(tmp_path, CacheBounds(max_entries=3, max_bytes=10_000)) == 3
    assert sorted(p.name for p in tmp_path.glob("*.json")) == ["e0.json", "e4.json", "e5.json"]


def test_the_size_bound_holds_too(tmp_path: Path) -> None:
    for i in range(5):
        entry(tmp_path, f"e{i}", 100, age_s=100 - i)
    prune(tmp_path, CacheBounds(max_entries=100, max_bytes=250))
    remaining = list(tmp_path.glob("*.json"))
    assert sum(p.stat().st_size for p in remaining) <= 250
    assert sorted(p.name for p in remaining) == ["e3.json", "e4.json"]


def test_the_entry_just_written_stays_even_when_it_alone_passes_a_bound(tmp_path: Path) -> None:
    old = entry(tmp_path, "old", 10, age_s=50)
    new = entry(tmp_path, "new", 500, age_s=100)  # an older mtime than `old`, yet just written
    prune(tmp_path, CacheBounds(max_entries=1, max_bytes=100), keep=new)
    assert new.exists() and not old.exists()


def test_stale_partial_files_are_removed_and_fresh_ones_kept(tmp_path: Path) -> None:
    stale = tmp_path / ".k.1.tmp"
    fresh = tmp_path / ".k.2.tmp"
    for path in (stale, fresh):
        path.write_text("partial")
    moment = time.time() - STALE_PARTIAL_S - 10
    os.utime(stale, (moment, moment))
    prune(tmp_path, CacheBounds())
    assert not stale.exists() and fresh.exists()


def test_a_missing_folder_is_nothing_to_prune(tmp_path: Path) -> None:
    assert prune(tmp_path / "absent", CacheBounds(max_entries=0)) == 0


def test_validation_keeps_the_cache_folder_bounded_over_many_distinct_tasks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def validated(task: Task, *args: object) -> TaskSummary:
        return TaskSummary(task=task.name, device="cpu", shapes=())

    monkeypatch.setattr("kernelfoundry.tasks.validation._validate_in_child", validated)
    bounds = CacheBounds(max_entries=4, max_bytes=1 << 20)
    kept = Task(name="kept", reference_source=SOURCE.format("kept"))
    validate_task(kept, cache_dir=tmp_path, cache_bounds=bounds)
    for i in range(40):
        validate_task(
            Task(name=f"t{i}", reference_source=SOURCE.format(i)), cache_dir=tmp_path, cache_bounds=bounds
        )
        assert len(list(tmp_path.glob("*.json"))) <= bounds.max_entries
        validate_task(kept, cache_dir=tmp_path, cache_bounds=bounds)  # a cache hit: recently used again
    assert (tmp_path / f"{cache_key(kept, 'cpu')}.json").exists()
    assert not list(tmp_path.glob(".*.tmp"))
