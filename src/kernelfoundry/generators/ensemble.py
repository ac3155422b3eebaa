"""Several generators serving one name, with weights that adapt to which member produced improvements.

Each request goes to one member drawn by weight (deterministically from the request id). The draw's
weight is the configured weight times the member's record: its correct rate and its improvement rate
(Laplace-smoothed, relative to the other members', with a floor so no member starves). The record that
decides a request's draw is the run's, which the request carries (`GenerationRequest.member_record`,
kept by the evolver from the lineage): every replica of the llm service draws alike for a run, and a
resumed run keeps what it learned. Without it (a request from elsewhere) this process's own record,
over every run it served, decides. A member whose
provider fails (connection errors, 5xx, 429 or timeouts after its retries, a malformed body, a rejected
key) `failure_threshold` times in a row is taken out for `cooldown_s` seconds and then tried again;
the request that met the failure goes to the next member, and when every member is out the fallback
(the heuristic proposer) answers, so the run goes on. A member's answer without a usable kernel is its
own recorded failure, not a provider fault. The result names the member that answered, so candidates,
usage records and metrics are per model.

Evaluation outcomes come back through `observe(candidate_id, label)` with the archive's outcome labels
(kernelfoundry.domain.outcomes: improvement, new_cell, elite_replaced, neutral, regression, failed:*).
The clock is injected; no I/O here.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from kernelfoundry.domain.outcomes import IMPROVING
from kernelfoundry.generators.base import (
    GenerationRequest,
    GenerationResult,
    GenerationUsage,
    Generator,
    MemberRecord,
)
from kernelfoundry.generators.providers.transport import GenerationFailure

IMPROVED = frozenset(kind.value for kind in IMPROVING)
REMEMBERED_REQUESTS = 50_000


@dataclass
class MemberStats:
    requests: int = 0
    provider_failures: int = 0
    generation_failures: int = 0  # answered, but without a usable kernel
    candidates: int = 0
    evaluated: int = 0
    correct: int = 0
    improvements: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def record(self) -> MemberRecord:
        return MemberRecord(self.evaluated, self.correct, self.improvements)

    def as_dict(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


@dataclass
class Member:
    generator: Generator
    weight: float = 1.0
    stats: MemberStats = field(default_factory=MemberStats)
    consecutive_failures: int = 0
    out_until: float = 0.0

    @property
    def name(self) -> str:
        return self.generator.name


class Ensemble:
    def __init__(
        self,
        name: str,
        members: Sequence[Member],
        fallback: Generator | None = None,
        *,
        failure_threshold: int = 3,
        cooldown_s: float = 60.0,
        weight_floor: float = 0.1,
        seeder: str = "",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one member")
        names = [m.name for m in members]
        if len(set(names)) != len(names):
            raise ValueError(f"ensemble members must have distinct names: {names}")
        if seeder and seeder not in names:
            raise ValueError(f"the seeding member {seeder!r} is not in the ensemble ({', '.join(names)})")
        self.name = name
        self.members = {m.name: m for m in members}
        self.fallback = fallback
        self.failure_threshold = failure_threshold
        self.cooldown_s = cooldown_s
        self.weight_floor = weight_floor
        self.seeder = seeder
        self.clock = clock
        self._answered_by: OrderedDict[str, str] = OrderedDict()
        self.fallback_stats = MemberStats()

    def __repr__(self) -> str:
        return f"Ensemble({self.name!r}, members={list(self.members)})"

    # -- weights --------------------------------------------------------------------------------------
    def weights(self, record: Mapping[str, MemberRecord] | None = None) -> dict[str, float]:
        """Each member's draw weight: configured weight x its record relative to the others', by
        `record` (a run's; a member missing from it has none yet) or, without one, by this process's."""
        records = (
            {n: record.get(n, MemberRecord()) for n in self.members}
            if record
            else {n: m.stats.record for n, m in self.members.items()}
        )
        scores = {n: r.correct_rate * r.improvement_rate for n, r in records.items()}
        mean = sum(scores.values()) / len(scores)
        return {
            n: m.weight * max(self.weight_floor, scores[n] / mean if mean > 0 else 1.0)
            for n, m in self.members.items()
        }

    def available(self) -> list[Member]:
        now = self.clock()
        return [m for m in self.members.values() if m.out_until <= now]

    def _order(self, request: GenerationRequest) -> list[Member]:
        """Members to ask, in order: the weighted draw first, then the rest by weight."""
        members = self.available()
        if not members:
            return []
        weights = self.weights(request.member_record)
        rng = random.Random(f"{request.request_id}/{request.seed}")
        if self.seeder and request.parent is None and self.seeder in {m.name for m in members}:
            first = self.members[self.seeder]
        else:
            first = rng.choices(members, weights=[weights[m.name] for m in members], k=1)[0]
        rest = sorted((m for m in members if m is not first), key=lambda m: (-weights[m.name], m.name))
        return [first, *rest]

    # -- generation -----------------------------------------------------------------------------------
    async def generate(self, request: GenerationRequest) -> GenerationResult:
        faults: list[str] = []
        for member in self._order(request):
            result = await self._ask(member, request)
            if result is not None:
                return result
            faults.append(member.name)
        if self.fallback is not None:
            result = await self.fallback.generate(request)
            self._account(self.fallback_stats, result)
            self._remember(request.request_id, "")
            return result
        if not faults:
            reason = "provider_unavailable"
            message = "every member of the ensemble is taken out after repeated failures; no fallback"
        else:
            reason = "provider_unavailable"
            message = f"every member failed ({', '.join(faults)}) and the ensemble has no fallback"
        return GenerationResult((), GenerationUsage(), self.name, reason, message)

    async def _ask(self, member: Member, request: GenerationRequest) -> GenerationResult | None:
        """The member's result, or None when its provider failed (so the next member is asked)."""
        stats = member.stats
        stats.requests += 1
        try:
            result = await member.generator.generate(request)
        except GenerationFailure as failure:
            result = GenerationResult((), failure.usage, member.name, failure.reason, failure.message)
        except Exception as exc:  # a member that breaks is out like one whose provider fails
            message = f"{member.name}: {type(exc).__name__}: {exc}"[:2000]
            result = GenerationResult((), GenerationUsage(), member.name, "provider_unavailable", message)
        fault = bool(result.error) and not result.candidates and result.error in GenerationFailure.TRANSPORT
        self._account(stats, result)
        if fault:
            stats.provider_failures += 1
            member.consecutive_failures += 1
            if member.consecutive_failures >= self.failure_threshold:
                member.out_until = self.clock() + self.cooldown_s
                member.consecutive_failures = 0
            return None
        member.consecutive_failures = 0
        if result.error and not result.candidates:
            stats.generation_failures += 1
        self._remember(request.request_id, member.name)
        return GenerationResult(result.candidates, result.usage, member.name, result.error, result.message)

    @staticmethod
    def _account(stats: MemberStats, result: GenerationResult) -> None:
        stats.candidates += len(result.candidates)
        stats.prompt_tokens += result.usage.prompt_tokens
        stats.completion_tokens += result.usage.completion_tokens
        stats.cost_usd += result.usage.cost_usd

    def _remember(self, request_id: str, member: str) -> None:
        self._answered_by[request_id] = member
        self._answered_by.move_to_end(request_id)
        while len(self._answered_by) > REMEMBERED_REQUESTS:
            self._answered_by.popitem(last=False)

    # -- outcomes -------------------------------------------------------------------------------------
    def observe(self, candidate_id: str, label: str, writer: str | None = None) -> str | None:
        """Credit an evaluated candidate's outcome to the member that wrote it; its name, or None when
        the candidate did not come from this ensemble (sweep points, other services' requests).

        `writer` is the member the outcome event names (any replica can credit it); without it, only a
        request this process answered can be credited."""
        if writer is not None:
            name = self._member_named(writer)
        else:
            request_id, sep, index = candidate_id.rpartition("-c")
            if not sep or not index.isdigit():
                return None
            name = self._answered_by.get(request_id)
        if name is None:
            return None
        stats = self.members[name].stats if name else self.fallback_stats
        stats.evaluated += 1
        if not label.startswith("failed"):
            stats.correct += 1
        if label in IMPROVED:
            stats.improvements += 1
        return name or (self.fallback.name if self.fallback is not None else None)

    def _member_named(self, writer: str) -> str | None:
        """The member called `writer`, "" for the fallback, None for a name this ensemble does not have."""
        if writer in self.members:
            return writer
        if self.fallback is not None and writer == self.fallback.name:
            return ""
        return None

    def snapshot(self) -> dict[str, dict[str, float]]:
        weights = self.weights()
        now = self.clock()
        out = {
            n: {**m.stats.as_dict(), "weight": round(weights[n], 4), "out": float(m.out_until > now)}
            for n, m in self.members.items()
        }
        if self.fallback is not None:
            out[f"{self.fallback.name} (fallback)"] = self.fallback_stats.as_dict()
        return out

    async def close(self) -> None:
        generators = [m.generator for m in self.members.values()]
        if self.fallback is not None and all(self.fallback is not g for g in generators):
            generators.append(self.fallback)
        for generator in generators:
            close = getattr(generator, "close", None)
            if close is not None:
                await close()
