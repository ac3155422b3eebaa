"""Baselines of a task's shape are reused while young enough, timed again once older, and bounded."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kernelfoundry.evaluation import baseline_cache
from kernelfoundry.evaluation.baseline_cache import TimedBaselines
from kernelfoundry.evaluation.settings import EvaluationSettings


@pytest.fixture(autouse=True)
def empty() -> Iterator[None]:
    baseline_cache.clear()
    yield
    baseline_cache.clear()


def test_reused_while_younger_than_the_limit_then_timed_again() -> None:
    key = baseline_cache.cache_key("source", [("N", 4)], "cuda:0", 100, 5, True, True, 16)
    baseline_cache.remember(key, TimedBaselines(1.5, 1.2, "", measured_at=100.0))
    assert baseline_cache.fresh(key, 300.0, now=399.0) == TimedBaselines(1.5, 1.2, "", 100.0)
    assert baseline_cache.fresh(key, 300.0, now=401.0) is None
    assert baseline_cache.fresh(key, 0.0, now=100.0) is None  # 0: never reused


def test_every_part_of_the_protocol_is_in_the_key() -> None:
    base = ("source", [("N", 4)], "cuda:0", 100, 5, True, True, 16)
    keys = {baseline_cache.cache_key(*base)}
    for i in range(len(base)):
        changed = list(base)
        changed[i] = "other"
        keys.add(baseline_cache.cache_key(*changed))
    assert len(keys) == len(base) + 1


def test_the_oldest_entries_go_beyond_the_bound() -> None:
    for i in range(baseline_cache.MAX_ENTRIES + 5):
        baseline_cache.remember(str(i), TimedBaselines(1.0, None, "", measured_at=0.0))
    assert baseline_cache.fresh("0", 10.0, now=1.0) is None
    assert baseline_cache.fresh(str(baseline_cache.MAX_ENTRIES + 4), 10.0, now=1.0) is not None


def test_backend_defaults_and_validation() -> None:
    assert EvaluationSettings().baseline_reuse_for("cpu") == 0.0
    assert EvaluationSettings().baseline_reuse_for("cuda") == 300.0
    assert EvaluationSettings(baseline_max_age_s=5.0).baseline_reuse_for("cuda") == 5.0
    with pytest.raises(ValueError, match="baseline_max_age_s"):
        EvaluationSettings(baseline_max_age_s=-1.0)
