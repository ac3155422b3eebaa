import random

from kernelfoundry.domain.metaprompt import (
    PITFALLS,
    STRATEGIES,
    Feedback,
    MetaPrompter,
    PromptVariant,
    RuleBasedRewriter,
)
from kernelfoundry.domain.operators import OPERATORS


def fb(label: str, improvement: float, operator: str = "tiling", message: str = "") -> Feedback:
    return Feedback(1, operator, label, improvement, message)


def test_meta_prompter_replaces_a_low_fitness_prompt_variant():
    mp = MetaPrompter(every=2, population=2, min_children=3)
    good = mp.variants["p0"]
    bad = mp.add(PromptVariant("bad"))
    for _ in range(4):
        mp.record(good.variant_id, fb("improvement", 0.5))
        mp.record(bad.variant_id, fb("failed:compile_error", -1.0, message="error: bad"))
    assert mp.on_generation(1) is None  # not a K-th generation
    new = mp.on_generation(2)
    assert new is not None
    assert "bad" not in mp.variants and mp.retired == ["bad"]
    assert new.parent_id == "p0"
    assert set(mp.variants) == {"p0", new.variant_id}


def test_no_variant_is_retired_before_it_has_enough_children():
    mp = MetaPrompter(every=1, population=2, min_children=5)
    mp.add(PromptVariant("other"))
    mp.record("p0", fb("improvement", 0.2))
    assert mp.on_generation(1) is None
    assert set(mp.variants) == {"p0", "other"}


def test_selection_prefers_the_fitter_variant_once_both_are_tried():
    mp = MetaPrompter(every=5, population=3, min_children=2)
    mp.add(PromptVariant("weak"))
    for _ in range(5):
        mp.record("p0", fb("improvement", 0.6))
        mp.record("weak", fb("regression", -0.3))
    rng = random.Random(0)
    picks = [mp.select(rng).variant_id for _ in range(200)]
    assert picks.count("p0") > 150


def test_rule_based_rewriter_turns_frequent_failures_into_pitfalls_and_wins_into_strategies():
    feedback = [
        fb("failed:compile_error", -1.0, "tiling", 'kernel.cu(3): error: identifier "TILE" is undefined'),
        fb("failed:compile_error", -1.0, "tiling", "other error"),
        fb("failed:wrong_result", -1.0, "fusion", "largest mismatch 0.3"),
        fb("improvement", 0.4, "vectorize"),
        fb("improvement", 0.2, "vectorize"),
        fb("regression", -0.2, "parallel"),
    ]
    sections, weights = RuleBasedRewriter().rewrite(PromptVariant("p0"), feedback)
    pitfalls = sections[PITFALLS].splitlines()
    assert pitfalls[0].startswith("- compile_error in 2 of the last 6 children")
    assert 'identifier "TILE" is undefined' in pitfalls[0]
    assert any("wrong_result" in line for line in pitfalls)
    assert any("'parallel' children ran slower" in line for line in pitfalls)
    assert sections[STRATEGIES] == "- 'vectorize' improved its parent 2 times (mean +30%)"
    assert set(weights) == set(OPERATORS)
    assert weights["vectorize"] > 1.0 > weights["tiling"]
    assert abs(sum(weights.values()) / len(weights) - 1.0) < 0.05
    assert min(weights.values()) >= 0.1


def test_rewriter_is_deterministic():
    mp = MetaPrompter(every=1, population=3, min_children=1)
    mp.record("p0", fb("improvement", 0.3, "vectorize"))
    mp.record("p0", fb("failed:timeout", -1.0, "tiling", "deadline of 10 s exceeded"))
    first = mp.on_generation(1)
    twin = RuleBasedRewriter().rewrite(mp.variants["p0"], list(mp.feedback))
    assert twin == (first.sections, first.proposal_weights)
