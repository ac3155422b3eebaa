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
    with EvaluationWorker("cpu", cpu_threads=2) as shared:
        yield shared
