"""What the GPU tests of the CUDA families share: units at given tunables, all built once (on every core:
a unit's code does not depend on the shape) into one cache, and one evaluation worker to judge them."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from kernelfoundry.domain.kernel import KernelSource


def with_params(source: KernelSource, params: dict[str, int]) -> KernelSource:
    return KernelSource(
        source.language, source.code, source.entry_point, source.glue, source.tunables, params
    )


def built_units_and_worker(
    tmp_path_factory: pytest.TempPathFactory, units: Callable[[], Iterable[KernelSource]], label: str
) -> Iterator[tuple[Any, Any]]:
    """(the build cache holding every unit `units()` gives, a CUDA evaluation worker); skips without a
    CUDA device, before generating anything."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from kernelfoundry.evaluation import EvaluationWorker
    from kernelfoundry.toolchains import BuildCache, BuildTarget, build

    cache = BuildCache(tmp_path_factory.mktemp(label))
    distinct = {(u.code, tuple(sorted(u.params.items()))): u for u in units()}
    with ThreadPoolExecutor(os.cpu_count() or 4) as pool:
        built = list(pool.map(lambda u: build(u, BuildTarget("cuda", "sm90"), cache), distinct.values()))
    assert all(b.ok for b in built), [b.log for b in built if not b.ok][:1]
    worker = EvaluationWorker("cuda:0")
    try:
        yield cache, worker
    finally:
        worker.close()
