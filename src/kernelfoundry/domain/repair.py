"""Repair: a failed candidate may be sent back with its error before it counts as a dead end.

`RepairPolicy` decides whether a failure is worth a repair attempt (only reasons a generator can act on -
a compile error, a wrong or unwritten result - and only `max_attempts` times along one repair chain) and
builds the feedback text: the failure reason, the most telling lines of the log, and the largest mismatch.

This module must never perform I/O or read a clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kernelfoundry.domain.evaluation import EvaluationInfo

REPAIRABLE_REASONS = frozenset(
    {
        "compile_error",
        "link_error",
        "wrong_result",
        "output_not_written",
        "glue_rejected",
        "missing_entry_point",
    }
)


@dataclass(frozen=True)
class RepairRequest:
    candidate_id: str  # the failed candidate whose source is to be fixed
    parent_id: str | None  # the elite it was bred from (the repaired child keeps this parent)
    attempt: int  # 1 for the first repair of a fresh failure
    reason: str
    feedback: str


@dataclass(frozen=True)
class RepairPolicy:
    max_attempts: int = 2
    repairable: frozenset[str] = field(default_factory=lambda: REPAIRABLE_REASONS)
    max_log_lines: int = 20
    max_chars: int = 2000

    def allows(self, evaluation: EvaluationInfo, attempts_so_far: int) -> bool:
        """Whether a failed evaluation gets another try; `attempts_so_far` counts repairs before it."""
        reason = evaluation.reason
        return reason is not None and reason in self.repairable and attempts_so_far < self.max_attempts

    def feedback(self, evaluation: EvaluationInfo) -> str:
        """Text for the generator: what failed, the log lines that say why, and the largest mismatch."""
        parts = [f"The previous kernel failed with reason `{evaluation.reason}`."]
        log = self._log_excerpt(evaluation.message)
        if log:
            parts.append(log)
        if evaluation.mismatch is not None:
            parts.append(evaluation.mismatch.describe().capitalize() + ".")
        parts.append("Fix this failure and keep the strategy otherwise unchanged.")
        return "\n".join(parts)[: self.max_chars]

    def _log_excerpt(self, message: str) -> str:
        lines = [ln.rstrip() for ln in message.splitlines() if ln.strip()]
        if len(lines) > self.max_log_lines:
            # errors first: a compiler log's first errors explain the rest
            errors = [ln for ln in lines if "error" in ln.lower()]
            rest = [ln for ln in lines if "error" not in ln.lower()]
            lines = (errors + rest)[: self.max_log_lines]
        return "\n".join(lines)

    def request(
        self, candidate_id: str, parent_id: str | None, evaluation: EvaluationInfo, attempts_so_far: int
    ) -> RepairRequest | None:
        if not self.allows(evaluation, attempts_so_far):
            return None
        assert evaluation.reason is not None
        return RepairRequest(
            candidate_id=candidate_id,
            parent_id=parent_id,
            attempt=attempts_so_far + 1,
            reason=evaluation.reason,
            feedback=self.feedback(evaluation),
        )
