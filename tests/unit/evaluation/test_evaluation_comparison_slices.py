"""A comparison made slice by slice (outputs larger than CHUNK_ELEMENTS) gives the figures of the whole."""

from __future__ import annotations

import math

import pytest

from kernelfoundry.evaluation import comparison
from kernelfoundry.evaluation.comparison import FLOAT_TOLERANCE

torch = pytest.importorskip("torch")


def whole_and_sliced(monkeypatch: pytest.MonkeyPatch, call):  # type: ignore[no-untyped-def]
    whole = call()
    monkeypatch.setattr(comparison, "CHUNK_ELEMENTS", 7)  # slices that split rows, and a short last one
    return whole, call()


def cases() -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    ref = torch.randn(6, 17, generator=gen, dtype=torch.float64)
    close = ref.to(torch.float32)
    wrong = close.clone()
    wrong[2, 3] += 1.0
    wrong[5, 16] -= 2.0  # the worst element in the last slice
    ties = close.clone()
    ties[0, 1] += 1.0
    ties[4, 0] += 1.0  # the same excess twice: the first wins
    unwritten = close.clone()
    unwritten[3, 4:9] = float("nan")
    special = ref.clone()
    special[1, 1], special[2, 2] = float("inf"), float("nan")
    special_out = special.to(torch.float32)
    return [
        ("close", close, ref),
        ("wrong", wrong, ref),
        ("ties", ties, ref),
        ("unwritten", unwritten, ref),
        ("inf and nan matched", special_out, special),
    ]


@pytest.mark.parametrize("name,out,ref", cases(), ids=[c[0] for c in cases()])
def test_compare_and_max_error_are_the_same_sliced(
    name: str, out: torch.Tensor, ref: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole, sliced = whole_and_sliced(monkeypatch, lambda: comparison.compare(out, ref, FLOAT_TOLERANCE, 0.0))
    assert repr(sliced) == repr(whole)  # NaN figures (an unwritten worst element) compare as text
    with monkeypatch.context() as patch:
        patch.setattr(comparison, "CHUNK_ELEMENTS", 1 << 26)
        expected = comparison.max_abs_error(out, ref)
    assert comparison.max_abs_error(out, ref) == expected


def test_the_worst_element_is_found_in_a_later_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    ref = torch.zeros(40, dtype=torch.float64)
    out = torch.zeros(40)
    out[33] = 5.0
    monkeypatch.setattr(comparison, "CHUNK_ELEMENTS", 8)
    result = comparison.compare(out, ref, FLOAT_TOLERANCE)
    assert result.worst_index == (33,) and result.worst_value == 5.0 and result.mismatches == 1


@pytest.mark.parametrize("constant", [False, True])
def test_the_degenerate_output_test_is_the_same_sliced(
    constant: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    gen = torch.Generator().manual_seed(1)
    ref = torch.randn(3000, generator=gen, dtype=torch.float64) * 3 + 1
    ref[10] = float("inf")  # non-finite reference values are left out of its spread
    out = torch.full((3000,), 0.5) if constant else ref.to(torch.float32)
    whole, sliced = whole_and_sliced(monkeypatch, lambda: comparison.is_degenerate(out, ref))
    assert whole is constant and sliced is constant


def test_the_pairwise_spread_matches_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    values = torch.randn(1001, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 1e3 + 1e6
    spread = comparison._Spread()
    for start in range(0, 1001, 64):
        spread.add(values[start : start + 64])
    assert math.isclose(spread.std(), float(values.std()), rel_tol=1e-9)
    assert spread.count == 1001


def test_bitwise_equal_by_slices_finds_a_difference_in_any_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Inputs larger than a slice are compared a slice at a time (no bool per byte of the whole): a
    single flipped bit in the first, a middle or the short last slice is found."""
    monkeypatch.setattr(comparison, "CHUNK_ELEMENTS", 3)  # 24-byte slices over 101 floats (404 bytes)
    a = torch.randn(101)
    assert comparison.bitwise_equal(a, a.clone())
    for at in (0, 50, 100):
        b = a.clone()
        b.view(torch.int32)[at] ^= 1
        assert not comparison.bitwise_equal(a, b), at


@pytest.mark.parametrize("numel", [1, 2, 13, 14, 29])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int8])
def test_the_content_digest_is_the_same_sliced(
    monkeypatch: pytest.MonkeyPatch, numel: int, dtype: torch.dtype
) -> None:
    gen = torch.Generator().manual_seed(numel)
    value = (torch.randn(numel, generator=gen) * 50).to(dtype)
    whole, sliced = whole_and_sliced(monkeypatch, lambda: comparison.content_digest(value))
    assert whole == sliced


def test_the_content_digest_tells_draws_apart_in_any_slice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(comparison, "CHUNK_ELEMENTS", 7)
    value = torch.randn(40, generator=torch.Generator().manual_seed(1))
    digest = comparison.content_digest(value)
    for at in (0, 7, 8, 39):  # the first slice, a slice's first odd word, the last
        other = value.clone()
        other[at] += 1.0
        assert comparison.content_digest(other) != digest


@pytest.mark.parametrize("name,out,ref", cases(), ids=[c[0] for c in cases()])
def test_unwritten_elements_are_counted_and_found_the_same_sliced(
    name: str, out: torch.Tensor, ref: torch.Tensor, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The poison check counts and locates by slices what a whole-output mask finds (the mask of a
    6.4 GB output is 1.6 GB of bools, three at once)."""
    mask = comparison.unwritten_mask(out, ref)
    first = tuple(int(v) for v in mask.nonzero()[0].tolist()) if bool(mask.any()) else ()
    whole, sliced = whole_and_sliced(monkeypatch, lambda: comparison.unwritten(out, ref))
    assert whole == sliced == comparison.Unwritten(int(mask.sum()), first)
    if name == "unwritten":
        assert sliced == comparison.Unwritten(5, (3, 4))  # five elements, across a slice's edge


def test_an_unwritten_element_in_a_later_slice_is_found_there(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(comparison, "CHUNK_ELEMENTS", 4)
    out, ref = torch.zeros(3, 5), torch.zeros(3, 5, dtype=torch.float64)
    out[2, 3] = float("nan")
    assert comparison.unwritten(out, ref) == comparison.Unwritten(1, (2, 3))
    assert comparison.unwritten(torch.tensor(float("nan")), torch.tensor(1.0)) == comparison.Unwritten(1, ())
