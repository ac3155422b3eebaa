"""The evolution engine: the pure facade the evolver service drives.

The service asks `plan_generation(now, rng)` for a batch of generation requests (`GenerationPlan`: parent
elite or None for seeding, mutation operator, direction and intent, hints, guidance sections, proposal
weights, prompt variant, island, or a repair request), sends them to a generator, has the children compiled
and executed, and feeds each result back through `record_evaluation(candidate, evaluation) -> Outcome`.
`stop(now)` says when a budget is spent; `summary()` exposes the archive map, outcome counts and prompt
variants. Recording is idempotent per candidate id (deliveries are at-least-once).

Resume has one path: `EvolutionEngine.replay(events)` rebuilds the state from the recorded
`GenerationStarted` events and (candidate, evaluation) pairs in order - planning draws random numbers,
recording never does, so replay needs no random state. The evolver's resume
(kernelfoundry.services.evolver.resume) rebuilds these events from the lineage and calls it.

This module must never perform I/O or read a clock; randomness comes only from a passed random.Random.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from kernelfoundry.domain.archive import Archive, Cell, Elite
from kernelfoundry.domain.budgets import Budget, BudgetTracker, StopDecision
from kernelfoundry.domain.descriptors import AXES
from kernelfoundry.domain.evaluation import REPAIR_OPERATOR, SEED_OPERATOR, CandidateInfo, EvaluationInfo
from kernelfoundry.domain.islands import IslandModel
from kernelfoundry.domain.metaprompt import Feedback, MetaPrompter, Rewriter
from kernelfoundry.domain.operators import choose_operator
from kernelfoundry.domain.outcomes import (
    DEFAULT_NEUTRAL_BAND,
    Outcome,
    OutcomeCounts,
    OutcomeKind,
    classify_outcome,
)
from kernelfoundry.domain.repair import RepairPolicy, RepairRequest
from kernelfoundry.domain.selection import GuidedSelector, ParentSelector, UniformSelector
from kernelfoundry.domain.transitions import LEVEL_NAMES, STAY, Direction, TransitionStats, step


@dataclass(frozen=True)
class EngineConfig:
    batch_size: int = 4  # generation requests per generation
    selection: Literal["guided", "uniform"] = "guided"
    epsilon: float = 0.1
    exploration: float = 0.3
    islands: int = 1
    migration_interval: int = 10
    migrants: int = 1
    meta_every: int = 5
    prompt_population: int = 4
    prompt_min_children: int = 3
    neutral_band: float = DEFAULT_NEUTRAL_BAND
    max_repairs: int = 2  # repair attempts along one chain before a failure is a dead end
    repair_share: float = 0.5  # at most this share of a batch (at least one request) goes to repairs
    hint_limit: int = 3

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"engine batch_size must be at least 1, got {self.batch_size}")
        if self.selection not in ("guided", "uniform"):
            raise ValueError(f"engine selection must be 'guided' or 'uniform', got {self.selection!r}")
        if not 0.0 <= self.epsilon <= 1.0:
            raise ValueError(f"engine epsilon must lie in [0, 1], got {self.epsilon}")

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class GenerationPlan:
    generation: int
    island: int
    parent: Elite | None  # None: seed a fresh kernel
    operator: str
    direction: Direction | None  # axis move asked for; STAY re-tunes; None for seeds and repairs
    intent: str
    hints: tuple[str, ...]
    guidance: Mapping[str, str]
    proposal_weights: Mapping[str, float]
    prompt_variant_id: str
    repair: RepairRequest | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain data for a generation request message."""
        return {
            "generation": self.generation,
            "island": self.island,
            "parent": self.parent.to_dict() if self.parent else None,
            "operator": self.operator,
            "direction": list(self.direction) if self.direction else None,
            "intent": self.intent,
            "hints": list(self.hints),
            "guidance": dict(self.guidance),
            "proposal_weights": dict(self.proposal_weights),
            "prompt_variant_id": self.prompt_variant_id,
            "repair": (
                {
                    "candidate_id": self.repair.candidate_id,
                    "parent_id": self.repair.parent_id,
                    "attempt": self.repair.attempt,
                    "reason": self.repair.reason,
                    "feedback": self.repair.feedback,
                }
                if self.repair
                else None
            ),
        }


@dataclass(frozen=True)
class GenerationStarted:
    """What planning a generation changed, recorded so `replay` reproduces it without random draws."""

    generation: int
    at: float
    repairs_issued: tuple[str, ...] = ()  # failed candidate ids whose repair requests were handed out
    island_slots: int = 0  # non-repair requests, each advancing the island round-robin


EngineEvent = GenerationStarted | tuple[CandidateInfo, EvaluationInfo]


@dataclass
class _Known:
    cell: Cell
    fitness: float
    island: int
    repair_depth: int = 0


@dataclass
class _PendingRepair:
    island: int
    request: RepairRequest
    prompt_variant_id: str | None = field(default=None)


def _intent(cell: Cell, direction: Direction) -> str:
    if direction == STAY:
        return "keep the current strategy and re-tune it"
    axis, _ = direction
    target = step(cell, direction)
    level = target[AXES.index(axis)]
    return f"move the {axis} strategy to {LEVEL_NAMES[axis][level]}"


class EvolutionEngine:
    def __init__(
        self,
        config: EngineConfig | None = None,
        budget: Budget | None = None,
        started_at: float = 0.0,
        rewriter: Rewriter | None = None,
    ) -> None:
        self.config = config or EngineConfig()
        c = self.config
        self.budget_spec = budget or Budget()
        self.generation = 0
        self.islands = IslandModel(c.islands, c.migration_interval, c.migrants)
        self.transitions = TransitionStats(improvement_threshold=c.neutral_band)
        self.meta = MetaPrompter(c.meta_every, c.prompt_population, c.prompt_min_children, rewriter=rewriter)
        self.budget = BudgetTracker(self.budget_spec, started_at)
        self.outcomes = OutcomeCounts()
        self.repair_policy = RepairPolicy(max_attempts=c.max_repairs)
        self.selector: ParentSelector = (
            GuidedSelector(epsilon=c.epsilon, exploration=c.exploration)
            if c.selection == "guided"
            else UniformSelector()
        )
        self.dead_ends = 0
        self._known: dict[str, _Known] = {}
        self._recorded: dict[str, Outcome] = {}
        self._repairs: deque[_PendingRepair] = deque()
        self.last_started: GenerationStarted | None = None  # record it after every plan_generation

    # -- generations ---------------------------------------------------------------------------
    def start_generation(self, now: float) -> GenerationStarted:
        """Advance to the next generation: patience, migration and meta-prompt evolution happen here.

        `plan_generation` calls it; call it directly only when replaying without recorded events."""
        self.generation += 1
        self.budget.generation_started()
        self.islands.migrate(self.generation)
        self.meta.on_generation(self.generation)
        return GenerationStarted(self.generation, now)

    def plan_generation(
        self, now: float, rng: random.Random, in_flight: int = 0, beside: int = 0
    ) -> list[GenerationPlan]:
        """Start a generation and return its batch of requests: empty once a budget is spent, or when
        the evaluations already in flight take what is left of the evaluation budget (no generation
        starts then), and never more requests than the evaluations left.

        `beside`: evaluations the generation sends besides its requests (sweep points), already counted
        in `in_flight`; the generation starts for them even when they leave no request."""
        if self.stop(now):
            return []
        slots = self.config.batch_size
        left = self.budget.evaluations_left(in_flight)
        if left is not None:
            slots = min(slots, left)
        if slots == 0 and beside == 0:
            return []
        self.start_generation(now)
        plans = self._plan(rng, slots)
        self.last_started = GenerationStarted(
            self.generation,
            now,
            tuple(p.repair.candidate_id for p in plans if p.repair is not None),
            sum(1 for p in plans if p.repair is None),
        )
        return plans

    def apply(self, event: GenerationStarted) -> None:
        """Replay a recorded generation start: the same state change as planning it, without planning."""
        self.start_generation(event.at)
        issued = set(event.repairs_issued)
        self._repairs = deque(p for p in self._repairs if p.request.candidate_id not in issued)
        for _ in range(event.island_slots):
            self.islands.next_island()
        self.last_started = event

    def _plan(self, rng: random.Random, slots: int) -> list[GenerationPlan]:
        plans: list[GenerationPlan] = []
        repair_slots = max(1, int(self.config.batch_size * self.config.repair_share))
        for _ in range(slots):
            variant = self.meta.select(rng)
            if self._repairs and repair_slots > 0:
                repair_slots -= 1
                pending = self._repairs.popleft()
                parent = self._parent_elite(pending.island, pending.request.parent_id)
                plans.append(
                    GenerationPlan(
                        generation=self.generation,
                        island=pending.island,
                        parent=parent,
                        operator=REPAIR_OPERATOR,
                        direction=None,
                        intent="repair the failed kernel",
                        hints=(),
                        guidance=dict(variant.sections),
                        proposal_weights=dict(variant.proposal_weights),
                        prompt_variant_id=variant.variant_id,
                        repair=pending.request,
                    )
                )
                continue
            island = self.islands.next_island()
            archive = self.islands.archive(island)
            choice = self.selector.choose(archive, self.transitions, rng, variant.proposal_weights)
            if choice is None:
                plans.append(
                    GenerationPlan(
                        generation=self.generation,
                        island=island,
                        parent=None,
                        operator=SEED_OPERATOR,
                        direction=None,
                        intent="write a first correct kernel for the task",
                        hints=(),
                        guidance=dict(variant.sections),
                        proposal_weights=dict(variant.proposal_weights),
                        prompt_variant_id=variant.variant_id,
                    )
                )
                continue
            cell = choice.elite.cell
            plans.append(
                GenerationPlan(
                    generation=self.generation,
                    island=island,
                    parent=choice.elite,
                    operator=choose_operator(choice.direction, variant.proposal_weights, rng),
                    direction=choice.direction,
                    intent=_intent(cell, choice.direction),
                    hints=tuple(self.transitions.hints(cell, self.config.hint_limit)),
                    guidance=dict(variant.sections),
                    proposal_weights=dict(variant.proposal_weights),
                    prompt_variant_id=variant.variant_id,
                )
            )
        return plans

    def _parent_elite(self, island: int, parent_id: str | None) -> Elite | None:
        if parent_id is None:
            return None
        for elite in self.islands.archive(island).elites():
            if elite.candidate_id == parent_id:
                return elite
        return None

    # -- results -------------------------------------------------------------------------------
    def outcome(self, candidate_id: str) -> Outcome | None:
        """What the recorded evaluation of `candidate_id` was classified as; None before it is recorded."""
        return self._recorded.get(candidate_id)

    def record_evaluation(self, candidate: CandidateInfo, evaluation: EvaluationInfo) -> Outcome:
        """Place an evaluated child and update every statistic; idempotent per candidate id."""
        if evaluation.candidate_id != candidate.candidate_id:
            raise ValueError(
                f"evaluation of {evaluation.candidate_id} recorded for candidate {candidate.candidate_id}"
            )
        if candidate.candidate_id in self._recorded:
            return self._recorded[candidate.candidate_id]
        while self.generation < candidate.generation:  # replay without explicit generation events
            self.start_generation(self.budget.started_at)
        archive: Archive = self.islands.archive(candidate.island)
        parent = self._known.get(candidate.parent_id) if candidate.parent_id else None
        placement = archive.offer(candidate, evaluation)
        raised_best = self.budget.evaluation_finished(evaluation.fitness)
        outcome = classify_outcome(
            evaluation,
            placement,
            parent.fitness if parent else None,
            self.config.neutral_band,
            raised_best,
        )
        cell = candidate.descriptors.cell
        if parent is not None:
            self.transitions.record(parent.cell, cell, parent.fitness, evaluation.fitness)
        depth = 0
        if candidate.repair_of is not None and candidate.repair_of in self._known:
            depth = self._known[candidate.repair_of].repair_depth + 1
        self._known[candidate.candidate_id] = _Known(cell, evaluation.fitness, candidate.island, depth)
        improvement = -1.0 if outcome.kind is OutcomeKind.FAILED else outcome.relative_change
        self.meta.record(
            candidate.prompt_variant_id,
            Feedback(
                candidate.generation, candidate.operator, outcome.label, improvement, evaluation.message
            ),
        )
        if evaluation.failed:
            request = self.repair_policy.request(
                candidate.candidate_id, candidate.parent_id, evaluation, depth
            )
            if request is None:
                self.dead_ends += 1
            else:
                self._repairs.append(_PendingRepair(candidate.island, request, candidate.prompt_variant_id))
        self.outcomes.add(outcome)
        self._recorded[candidate.candidate_id] = outcome
        return outcome

    # -- state ---------------------------------------------------------------------------------
    def stop(self, now: float) -> StopDecision:
        return self.budget.check(now)

    def merged_archive(self) -> Archive:
        """The best elite per cell over every island."""
        merged = Archive(history_limit=0)
        for archive in self.islands.archives:
            for elite in archive.elites():
                merged.offer_elite(elite)
        return merged

    def best(self) -> Elite | None:
        return self.islands.best()

    def summary(self) -> dict[str, Any]:
        prior = self.meta.prior_mean()
        return {
            "generation": self.generation,
            "evaluations": self.budget.evaluations,
            "dead_ends": self.dead_ends,
            "archive": self.merged_archive().summary(),
            "islands": [a.summary() for a in self.islands.archives],
            "outcomes": self.outcomes.to_dict(),
            "prompt_variants": [
                {
                    "variant_id": v.variant_id,
                    "fitness": v.fitness(prior),
                    "children": v.children,
                    "parent_id": v.parent_id,
                }
                for v in self.meta.variants.values()
            ],
        }

    def to_dict(self) -> dict[str, Any]:
        """The whole state as plain data, to compare engines (a replayed one with the live one) and to
        inspect; never read back: an engine is rebuilt only by `replay`."""
        return {
            "config": self.config.to_dict(),
            "generation": self.generation,
            "dead_ends": self.dead_ends,
            "islands": self.islands.to_dict(),
            "transitions": self.transitions.to_dict(),
            "meta": self.meta.to_dict(),
            "budget": self.budget.to_dict(),
            "outcomes": self.outcomes.to_dict(),
            "known": [[k, list(v.cell), v.fitness, v.island, v.repair_depth] for k, v in self._known.items()],
            "recorded": [
                [k, o.kind.value, o.fitness, o.parent_fitness, o.reason, o.global_best]
                for k, o in self._recorded.items()
            ],
            "repairs": [
                [p.island, p.prompt_variant_id, r.candidate_id, r.parent_id, r.attempt, r.reason, r.feedback]
                for p in self._repairs
                for r in [p.request]
            ],
        }

    @classmethod
    def replay(
        cls,
        events: Iterable[EngineEvent],
        config: EngineConfig | None = None,
        budget: Budget | None = None,
        started_at: float = 0.0,
        rewriter: Rewriter | None = None,
    ) -> EvolutionEngine:
        """Rebuild an engine from recorded events, in order."""
        engine = cls(config, budget, started_at, rewriter)
        for event in events:
            if isinstance(event, GenerationStarted):
                engine.apply(event)
            else:
                engine.record_evaluation(*event)
        return engine
