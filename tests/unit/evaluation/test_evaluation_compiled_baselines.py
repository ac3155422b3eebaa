"""The judge's torch.compile cache: one compilation per task source, shape and device, bounded."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kernelfoundry.evaluation import compiled_baselines
from kernelfoundry.evaluation.compiled_baselines import CompileFailed, cache_key, compiled_reference


@pytest.fixture(autouse=True)
def empty_cache() -> Iterator[None]:
    compiled_baselines.clear()
    yield
    compiled_baselines.clear()


def test_the_key_tells_source_shape_and_device_apart() -> None:
    base = cache_key("src", {"N": 4}, "cuda:0")
    assert base == cache_key("src", {"N": 4}, "cuda:0")
    assert (
        len(
            {
                base,
                cache_key("src2", {"N": 4}, "cuda:0"),
                cache_key("src", {"N": 5}, "cuda:0"),
                cache_key("src", {"N": 4}, "cuda:1"),
            }
        )
        == 4
    )


def test_a_key_is_compiled_once_then_reused() -> None:
    made: list[int] = []

    def compile_model() -> object:
        made.append(1)
        return object()

    first = compiled_reference("k", compile_model)
    assert compiled_reference("k", compile_model) is first
    assert len(made) == 1


def test_a_failed_compilation_is_not_tried_again() -> None:
    compiled_baselines.remember("k", CompileFailed("RuntimeError: no compiler"))
    with pytest.raises(CompileFailed, match="no compiler"):
        compiled_reference("k", lambda: pytest.fail("compiled again"))


def test_the_cache_is_bounded_oldest_out() -> None:
    for i in range(compiled_baselines.MAX_ENTRIES + 3):
        compiled_reference(f"k{i}", object)
    made: list[int] = []
    compiled_reference("k0", lambda: made.append(1) or object())
    assert made == [1]  # k0 was dropped, so it is compiled anew
    compiled_reference(f"k{compiled_baselines.MAX_ENTRIES + 2}", lambda: pytest.fail("dropped too soon"))
