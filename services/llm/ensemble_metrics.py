"""An ensemble's record as Prometheus metrics: each member's draw weight and counts of its outcomes.

The ensemble (kernelfoundry.generators.ensemble) knows nothing of metrics; this reads it. The weight
gauge is set from `Ensemble.weights()` (0 for a member taken out); the candidates' archive outcomes are
counted as the outcome handler credits them to a member; provider failures and answers without a usable
kernel are counted from the members' records, by what each added since the last look.
"""

from __future__ import annotations

from prometheus_client import Counter

from kernelfoundry.generators.ensemble import Ensemble
from kernelfoundry.telemetry.metrics import Metrics

# The archive's outcome labels (kernelfoundry.domain.outcomes); every `failed:<reason>` counts as failed.
ARCHIVE_OUTCOMES = frozenset({"improvement", "new_cell", "elite_replaced", "neutral", "regression"})


class EnsembleMetrics:
    def __init__(self, ensemble: Ensemble, metrics: Metrics) -> None:
        self.ensemble = ensemble
        self.metrics = metrics
        self._counted: dict[tuple[str, str], int] = {}
        self.refresh()

    def refresh(self) -> None:
        """Set every member's weight and count the request failures its record gained since the last call."""
        weights = self.ensemble.weights()
        drawn = {m.name for m in self.ensemble.available()}
        for name, member in self.ensemble.members.items():
            weight = weights[name] if name in drawn else 0.0
            self.metrics.ensemble_member_weight.labels(generator=self.ensemble.name, member=name).set(weight)
            self._catch_up(name, "provider_failure", member.stats.provider_failures)
            self._catch_up(name, "no_kernel", member.stats.generation_failures)

    def outcome(self, member: str, label: str) -> None:
        """One evaluated candidate of `member`, with its archive outcome label."""
        outcome = label if label in ARCHIVE_OUTCOMES else ("failed" if label.startswith("failed") else "")
        if outcome:
            self._counter(member, outcome).inc()

    def _catch_up(self, member: str, outcome: str, total: int) -> None:
        before = self._counted.get((member, outcome), 0)
        if total > before:
            self._counter(member, outcome).inc(total - before)
            self._counted[(member, outcome)] = total

    def _counter(self, member: str, outcome: str) -> Counter:
        return self.metrics.ensemble_member_outcomes_total.labels(
            generator=self.ensemble.name, member=member, outcome=outcome
        )
