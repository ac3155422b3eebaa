"""What the benchmarks record beside their figures (bench/provenance.py): the commit, the tree, the host."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from provenance import ROOT, load_average, machine, measured_commit, uncommitted_changes


def head(*flags: str) -> str:
    return subprocess.run(
        ["git", "rev-parse", *flags, "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_the_commit_is_head_in_full_or_in_gits_short_form(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KF_BENCH_COMMIT", raising=False)
    assert measured_commit() == head()
    assert measured_commit(short=True) == head("--short")


def test_a_tree_that_travelled_without_git_names_its_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KF_BENCH_COMMIT", "abc1234")
    assert measured_commit() == measured_commit(short=True) == "abc1234"


def test_uncommitted_changes_follow_git_status_of_the_paths_named() -> None:
    changed = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no", "--", "bench"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert uncommitted_changes(["bench"]) == bool(changed)


def test_the_host_is_described_by_its_load_cpus_platform_and_python() -> None:
    loads = load_average()
    assert len(loads) == 3 and all(x >= 0 for x in loads)
    assert set(machine()) == {"cpus", "platform", "python"}
    assert machine()["python"] == ".".join(map(str, sys.version_info[:3]))
