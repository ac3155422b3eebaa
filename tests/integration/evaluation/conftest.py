"""Fixtures: planted units built once per session, and one CPU worker shared by the tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from evaluation_fixtures import Units

from kernelfoundry.evaluation import EvaluationWorker
from kernelfoundry.toolchains import BuildCache


@pytest.fixture(scope="session")
def units(tmp_path_factory: pytest.TempPathFactory) -> Units:
    return Units(BuildCache(tmp_path_factory.mktemp("kf-build-cache")))


@pytest.fixture(scope="session")
def worker() -> Iterator[EvaluationWorker]:
    """Shared by the session's tests, so it never retires its judge (MAX_EVALUATIONS_PER_CHILD): a test
    comparing the judge's pid before and after a candidate would otherwise fail whenever the retirement
    fell between, depending on how many tests ran before it."""
    with EvaluationWorker("cpu", cpu_threads=2, max_evaluations_per_child=1_000_000) as shared:
        yield shared
