"""The judge's trial cache (trial_cache.py): seeds per task, references kept only for the values they
answer, within a byte budget, the least recently used idle task dropped first (tasks in use keep theirs)."""

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


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_budget_drops_the_least_recently_used_idle_task_and_never_keeps_what_cannot_fit() -> None:
    clock = Clock()
    cache = TrialCache(20_000, idle_s=60.0, clock=clock)  # two 8000-byte references
    for key in ("a", "b", "c"):
        cache.start(key, [1, 2], ())
    assert cache.keep("a", 1, (), reference()) and cache.keep("b", 1, (), reference())
    clock.now = 100.0
    assert cache.seeds("a") is not None  # "a" used: "b" is now the oldest and idle
    assert cache.keep("c", 1, (), reference())
    assert cache.seeds("b") is None and cache.seeds("a") is not None and cache.size == 16_000
    assert not cache.keep("a", 2, (), reference(5000))  # 40 KB: more than the whole budget
    assert TrialCache(0).capacity == 0


def test_tasks_in_use_keep_their_references_and_a_newcomer_s_are_not_kept() -> None:
    """Several tasks at once whose references do not all fit: dropping the least recently used to make
    room would evict each before its next candidate and nothing kept would be used."""
    clock = Clock()
    cache = TrialCache(20_000, idle_s=60.0, clock=clock)
    for key in ("a", "b", "c"):
        cache.start(key, [1, 2], ())
    assert cache.keep("a", 1, (), reference()) and cache.keep("b", 1, (), reference())
    clock.now = 30.0  # "a" and "b" used half a minute ago: in use
    assert not cache.keep("c", 1, (), reference())
    assert cache.reference("a", 1, ()) is not None and cache.reference("b", 1, ()) is not None
    clock.now = 200.0  # "a" and "b" idle since 30 s: the oldest goes
    assert cache.reference("b", 1, ()) is not None  # "b" in use again
    assert cache.keep("c", 1, (), reference())
    assert cache.seeds("a") is None and cache.reference("b", 1, ()) is not None


def test_the_default_budget_is_an_eighth_of_the_host_within_2_and_16_gib() -> None:
    from kernelfoundry.evaluation.trial_cache import default_capacity

    assert 2 << 30 <= default_capacity() <= 16 << 30


def test_the_budget_comes_from_the_judge_s_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KF_EVALUATION_TRIAL_CACHE_BYTES", "1234")
    assert TrialCache().capacity == 1234
    monkeypatch.setenv("KF_EVALUATION_TRIAL_CACHE_BYTES", "lots")
    with pytest.raises(ValueError, match="KF_EVALUATION_TRIAL_CACHE_BYTES"):
        TrialCache()
