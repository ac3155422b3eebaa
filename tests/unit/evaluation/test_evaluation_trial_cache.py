"""The judge's trial cache (trial_cache.py): seeds per task, references kept only for the values they
answer, within a byte budget, the least recently used task dropped first."""

from __future__ import annotations

import pytest
import torch

from kernelfoundry.evaluation.trial_cache import TrialCache, fingerprint, task_key


def values(seed: int, n: int = 1000) -> list[torch.Tensor]:
    return [torch.randn(n, generator=torch.Generator().manual_seed(seed)), torch.arange(3)]


def reference(n: int = 1000) -> list[torch.Tensor]:
    return [torch.zeros(n, dtype=torch.float64)]  # 8000 bytes


def test_fingerprints_tell_draws_apart_and_agree_on_the_same_draw() -> None:
    assert fingerprint(values(1)) == fingerprint(values(1))
    assert fingerprint(values(1)) != fingerprint(values(2))
    changed = values(1)
    changed[0][500] += 1e-3  # one element: the whole sum moves
    assert fingerprint(changed) != fingerprint(values(1))
    assert fingerprint([2.5, torch.empty(0)]) == fingerprint([2.5, torch.empty(0)])


def test_keys_separate_sources_shapes_overrides_and_devices() -> None:
    base = task_key("src", "small", {"n": 4}, "cpu")
    assert base == task_key("src", "small", {"n": 4}, "cpu")
    others = [
        task_key("src2", "small", {"n": 4}, "cpu"),
        task_key("src", "large", {"n": 4}, "cpu"),
        task_key("src", "small", {"n": 5}, "cpu"),
        task_key("src", "small", {"n": 4}, "cuda:0"),
    ]
    assert base not in others


def test_a_reference_is_given_back_only_for_the_values_it_answers() -> None:
    cache = TrialCache(1 << 20)
    assert cache.seeds("t") is None
    cache.start("t", [11, 12, 13], fingerprint([torch.ones(3)]))
    assert cache.seeds("t") == [11, 12, 13]
    assert cache.parameters_match("t", fingerprint([torch.ones(3)]))
    assert not cache.parameters_match("t", fingerprint([torch.zeros(3)]))
    assert cache.keep("t", 12, fingerprint(values(12)), reference())
    assert not cache.keep("t", 99, fingerprint(values(99)), reference())  # not one of its trial seeds
    kept = cache.reference("t", 12, fingerprint(values(12)))
    assert kept is not None and torch.equal(kept[0], reference()[0])
    assert cache.reference("t", 13, fingerprint(values(13))) is None  # never computed
    # other values for the same seed (a draw outside torch's generator): the whole entry goes
    assert cache.reference("t", 12, fingerprint(values(7))) is None
    assert cache.seeds("t") is None


def test_the_budget_drops_the_least_recently_used_task_and_never_keeps_what_cannot_fit() -> None:
    cache = TrialCache(20_000)  # two 8000-byte references
    for key in ("a", "b", "c"):
        cache.start(key, [1, 2], ())
    assert cache.keep("a", 1, (), reference()) and cache.keep("b", 1, (), reference())
    assert cache.seeds("a") is not None  # "a" used: "b" is now the oldest
    assert cache.keep("c", 1, (), reference())
    assert cache.seeds("b") is None and cache.seeds("a") is not None and cache.size == 16_000
    assert not cache.keep("a", 2, (), reference(5000))  # 40 KB: more than the whole budget
    assert TrialCache(0).capacity == 0


def test_the_budget_comes_from_the_judge_s_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KF_EVALUATION_TRIAL_CACHE_BYTES", "1234")
    assert TrialCache().capacity == 1234
    monkeypatch.setenv("KF_EVALUATION_TRIAL_CACHE_BYTES", "lots")
    with pytest.raises(ValueError, match="KF_EVALUATION_TRIAL_CACHE_BYTES"):
        TrialCache()
