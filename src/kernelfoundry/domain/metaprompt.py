"""The meta-prompter: guidance that co-evolves with the kernels.

A prompt variant is a set of named guidance sections ("common pitfalls", "strategies that worked") plus
proposal weights (mutation operator -> weight, what the heuristic proposer uses instead of text). Every
child records which variant produced it; a variant's fitness is the mean relative improvement of its
children over their parents (a failed child counts as -1), shrunk towards the population mean while it
has few children. Variants are selected like kernels (fitness-weighted, untried ones first). Every K
generations the worst variant that has enough children is retired and a new one is written from the best
by a `Rewriter` fed with recent failures and successes. The default `RuleBasedRewriter` is pure and
deterministic from those records; an LLM-backed rewriter can be plugged in through the same protocol.

This module must never perform I/O or read a clock; randomness comes only from a passed random.Random.
"""

from __future__ import annotations

import math
import random
from collections import Counter, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kernelfoundry.domain.operators import OPERATORS, default_weights

PITFALLS = "common pitfalls"
STRATEGIES = "strategies that worked"
DEFAULT_SECTIONS: dict[str, str] = {PITFALLS: "", STRATEGIES: ""}
IMPROVEMENT_CAP = 3.0  # a single lucky child may not dominate a variant's mean


@dataclass(frozen=True)
class Feedback:
    """One evaluated child as the meta-prompter sees it."""

    generation: int
    operator: str
    label: str  # outcome label: improvement, neutral, regression, new_cell, elite_replaced, failed:<reason>
    improvement: float  # relative change over the parent; -1.0 for a failure
    message: str = ""  # the failure's message (compile log excerpt, mismatch) when it failed

    @property
    def failed(self) -> bool:
        return self.label.startswith("failed:")

    @property
    def succeeded(self) -> bool:
        return not self.failed and self.improvement > 0


@dataclass
class PromptVariant:
    variant_id: str
    sections: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_SECTIONS))
    proposal_weights: dict[str, float] = field(default_factory=default_weights)
    parent_id: str | None = None
    born_generation: int = 0
    children: int = 0
    improvement_total: float = 0.0

    def record(self, improvement: float) -> None:
        self.children += 1
        self.improvement_total += max(-1.0, min(IMPROVEMENT_CAP, improvement))

    def mean_improvement(self) -> float:
        return self.improvement_total / self.children if self.children else 0.0

    def fitness(self, prior_mean: float = 0.0, prior_strength: float = 2.0) -> float:
        """Mean improvement of its children, shrunk towards `prior_mean` while they are few."""
        return (self.improvement_total + prior_strength * prior_mean) / (self.children + prior_strength)

    def to_dict(self) -> dict[str, Any]:
        return {
            "variant_id": self.variant_id,
            "sections": dict(self.sections),
            "proposal_weights": dict(self.proposal_weights),
            "parent_id": self.parent_id,
            "born_generation": self.born_generation,
            "children": self.children,
            "improvement_total": self.improvement_total,
        }


class Rewriter(Protocol):
    """Writes a new variant's sections and proposal weights from a parent variant and recent feedback."""

    def rewrite(
        self, parent: PromptVariant, feedback: Sequence[Feedback]
    ) -> tuple[dict[str, str], dict[str, float]]: ...


@dataclass
class RuleBasedRewriter:
    """Deterministic rewriting from the records: frequent failures become pitfalls, operators that
    improved their parents become strategies, and proposal weights move towards operators whose
    children improved (multiplicatively, normalised to mean 1, with a floor so none dies out)."""

    max_pitfalls: int = 3
    max_strategies: int = 3
    message_chars: int = 160
    learning_rate: float = 1.0
    weight_floor: float = 0.1

    def rewrite(
        self, parent: PromptVariant, feedback: Sequence[Feedback]
    ) -> tuple[dict[str, str], dict[str, float]]:
        sections = dict(parent.sections)
        sections[PITFALLS] = self._pitfalls(feedback)
        sections[STRATEGIES] = self._strategies(feedback)
        return sections, self._weights(parent.proposal_weights, feedback)

    def _pitfalls(self, feedback: Sequence[Feedback]) -> str:
        n = len(feedback)
        failures = Counter(f.label.removeprefix("failed:") for f in feedback if f.failed)
        examples: dict[str, str] = {}
        for f in feedback:
            reason = f.label.removeprefix("failed:")
            if f.failed and f.message and reason not in examples:
                examples[reason] = _one_line(f.message, self.message_chars)
        lines = []
        for reason, count in sorted(failures.items(), key=lambda kv: (-kv[1], kv[0]))[: self.max_pitfalls]:
            line = f"- {reason} in {count} of the last {n} children"
            if reason in examples:
                line += f", e.g.: {examples[reason]}"
            lines.append(line)
        slow = Counter(f.operator for f in feedback if f.label == "regression")
        for operator, count in sorted(slow.items(), key=lambda kv: (-kv[1], kv[0]))[:1]:
            lines.append(f"- '{operator}' children ran slower than their parent {count} times")
        return "\n".join(lines)

    def _strategies(self, feedback: Sequence[Feedback]) -> str:
        gains: dict[str, list[float]] = {}
        for f in feedback:
            if f.succeeded:
                gains.setdefault(f.operator, []).append(f.improvement)
        ranked = sorted(gains.items(), key=lambda kv: (-len(kv[1]), -sum(kv[1]), kv[0]))
        lines = [
            f"- '{op}' improved its parent {len(g)} times (mean +{100 * sum(g) / len(g):.0f}%)"
            for op, g in ranked[: self.max_strategies]
        ]
        return "\n".join(lines)

    def _weights(self, weights: Mapping[str, float], feedback: Sequence[Feedback]) -> dict[str, float]:
        rate: dict[str, float] = {}
        for op in OPERATORS:
            mine = [f for f in feedback if f.operator == op]
            rate[op] = (sum(f.succeeded for f in mine) + 1) / (len(mine) + 2)
        mean_rate = sum(rate.values()) / len(rate)
        new = {op: weights.get(op, 1.0) * (rate[op] / mean_rate) ** self.learning_rate for op in OPERATORS}
        norm = sum(new.values()) / len(new)
        return {op: round(max(self.weight_floor, w / norm), 6) for op, w in new.items()}


def _one_line(text: str, limit: int) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    first = next((ln for ln in lines if "error" in ln.lower()), lines[0] if lines else "")
    return first if len(first) <= limit else first[: limit - 3] + "..."


class MetaPrompter:
    """A small population of prompt variants, evolved every `every` generations."""

    def __init__(
        self,
        every: int = 5,
        population: int = 4,
        min_children: int = 3,
        window: int = 200,
        rewriter: Rewriter | None = None,
    ) -> None:
        if every < 1 or population < 2:
            raise ValueError("meta-prompter needs every >= 1 and a population of at least 2")
        self.every = every
        self.population = population
        self.min_children = min_children
        self.rewriter: Rewriter = rewriter or RuleBasedRewriter()
        self.feedback: deque[Feedback] = deque(maxlen=window)
        self.variants: dict[str, PromptVariant] = {}
        self._next_id = 0
        self.retired: list[str] = []
        self.add(PromptVariant(self._new_id()))

    def _new_id(self) -> str:
        vid = f"p{self._next_id}"
        self._next_id += 1
        return vid

    def add(self, variant: PromptVariant) -> PromptVariant:
        self.variants[variant.variant_id] = variant
        return variant

    def prior_mean(self) -> float:
        total = sum(v.children for v in self.variants.values())
        return sum(v.improvement_total for v in self.variants.values()) / total if total else 0.0

    def fitness(self, variant_id: str) -> float:
        return self.variants[variant_id].fitness(self.prior_mean())

    def select(self, rng: random.Random) -> PromptVariant:
        """Untried variants first; otherwise a softmax over fitness, so good prompts are used more."""
        untried = sorted(v for v, pv in self.variants.items() if pv.children < self.min_children)
        if untried:
            return self.variants[rng.choice(untried)]
        ids = sorted(self.variants)
        prior = self.prior_mean()
        scores = [self.variants[v].fitness(prior) for v in ids]
        top = max(scores)
        weights = [math.exp((s - top) / 0.1) for s in scores]
        return self.variants[rng.choices(ids, weights=weights, k=1)[0]]

    def record(self, variant_id: str | None, feedback: Feedback) -> None:
        self.feedback.append(feedback)
        if variant_id is not None and variant_id in self.variants:
            self.variants[variant_id].record(feedback.improvement)

    def on_generation(self, generation: int) -> PromptVariant | None:
        """At every K-th generation retire the worst tried variant (when full) and write a new one."""
        if generation <= 0 or generation % self.every or not self.feedback:
            return None
        prior = self.prior_mean()
        tried = [v for v in self.variants.values() if v.children >= self.min_children]
        if len(self.variants) >= self.population:
            if len(tried) < 2:
                return None  # nothing can be judged yet
            worst = min(tried, key=lambda v: (v.fitness(prior), v.variant_id))
            del self.variants[worst.variant_id]
            self.retired.append(worst.variant_id)
        pool = tried or list(self.variants.values())
        best = max(pool, key=lambda v: (v.fitness(prior), v.variant_id))
        sections, weights = self.rewriter.rewrite(best, list(self.feedback))
        return self.add(
            PromptVariant(
                self._new_id(),
                sections=sections,
                proposal_weights=weights,
                parent_id=best.variant_id,
                born_generation=generation,
            )
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "every": self.every,
            "population": self.population,
            "min_children": self.min_children,
            "window": self.feedback.maxlen,
            "next_id": self._next_id,
            "retired": list(self.retired),
            "variants": [v.to_dict() for v in self.variants.values()],
            "feedback": [
                [f.generation, f.operator, f.label, f.improvement, f.message] for f in self.feedback
            ],
        }
