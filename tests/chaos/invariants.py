"""What must hold after any chaos round, checked on plain observations (no I/O here).

The harness gathers, once everything has settled, what the lineage holds about each run (`RunLineage`) and
what the broker holds (`BrokerState`); `check` compares them with the guarantees of docs/architecture.md:
- every submitted run reached a final status (finished, failed or cancelled) in the lineage;
- every candidate announced on `kf.events.candidate.created` is in the lineage exactly once, and the
  lineage holds as many candidates as the evolver counted;
- every candidate has its evaluation (or the failed build that stands for it), and no candidate was
  evaluated twice, in the lineage or in the event history;
- the archive rebuilt from the lineage (the evolver's own resume replay) equals the archive the evolver
  reported when the run ended;
- no message is left in the work streams, and every dead letter carries a reason and a message; an event
  the store dead-lettered is lineage lost, so it is a violation too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

FINAL_STATUSES = ("finished", "failed", "cancelled")


@dataclass(frozen=True)
class RunLineage:
    """One run as the lineage holds it, and what the evolver said about it when it ended."""

    run_id: str
    status: str  # "" when the lineage has no record of the run
    candidate_ids: Sequence[str]
    evaluated_ids: Sequence[str]  # one entry per evaluation record
    failed_build_ids: Sequence[str]
    reported_generated: int  # the evolver's counters in RunFinished
    reported_resolved: int  # correct + failed
    evolver_archive: Mapping[str, str]  # cell ("memory/algorithm/parallelism") -> elite candidate id
    rebuilt_archive: Mapping[str, str]  # the same, replayed from the lineage


@dataclass(frozen=True)
class DeadLetterView:
    subject: str
    reason: str
    message: str
    service: str


@dataclass(frozen=True)
class BrokerState:
    created: Mapping[str, Sequence[str]]  # run id -> candidate ids announced in the event history
    evaluation_events: Mapping[str, int]  # candidate id -> EvaluationFinished events in the history
    work_messages: int  # messages still in the work streams
    dead_letters: Sequence[DeadLetterView]


@dataclass(frozen=True)
class Violation:
    reason: str
    message: str


@dataclass(frozen=True)
class Tally:
    runs_final: int
    runs_completed: int
    candidates: int
    candidates_lost: int
    duplicates: int


def check(submitted: Sequence[str], runs: Mapping[str, RunLineage], broker: BrokerState) -> list[Violation]:
    """Every broken guarantee, each with its reason code and the run or candidate it concerns."""
    violations: list[Violation] = []
    for run_id in submitted:
        run = runs.get(run_id)
        if run is None or run.status not in FINAL_STATUSES:
            status = run.status if run is not None else "absent"
            violations.append(
                Violation("run_not_final", f"run {run_id} is {status or 'absent'} in the lineage")
            )
            continue
        violations += _check_run(run, broker.created.get(run_id, ()), broker.evaluation_events)
    if broker.work_messages:
        violations.append(
            Violation("work_left", f"{broker.work_messages} message(s) left in the work streams")
        )
    for letter in broker.dead_letters:
        if not letter.reason or not letter.message:
            violations.append(
                Violation("dead_letter_without_reason", f"dead letter of {letter.subject} has no reason")
            )
        if letter.service == "store":
            violations.append(
                Violation(
                    "lineage_event_dead_lettered",
                    f"the store gave up on {letter.subject}: {letter.reason}: {letter.message[:200]}",
                )
            )
    return violations


def _check_run(
    run: RunLineage, created: Sequence[str], evaluation_events: Mapping[str, int]
) -> list[Violation]:
    out: list[Violation] = []
    in_lineage = set(run.candidate_ids)
    for candidate_id, count in Counter(run.candidate_ids).items():
        if count > 1:
            out.append(
                Violation("candidate_duplicated", f"candidate {candidate_id} is {count} times in the lineage")
            )
    for candidate_id in sorted(set(created) - in_lineage):
        out.append(
            Violation("candidate_lost", f"candidate {candidate_id} of run {run.run_id} is not in the lineage")
        )
    if run.status == "finished" and run.reported_generated != len(in_lineage):
        out.append(
            Violation(
                "candidate_count_mismatch",
                f"run {run.run_id}: the evolver generated {run.reported_generated} candidates, "
                f"the lineage holds {len(in_lineage)}",
            )
        )
    resolved = set(run.evaluated_ids) | set(run.failed_build_ids)
    for candidate_id in sorted(in_lineage - resolved):
        out.append(
            Violation("evaluation_missing", f"candidate {candidate_id} has no evaluation in the lineage")
        )
    for candidate_id, count in Counter(run.evaluated_ids).items():
        if count > 1:
            out.append(
                Violation("evaluation_duplicated", f"candidate {candidate_id} has {count} evaluation records")
            )
    for candidate_id in sorted(in_lineage):
        events = evaluation_events.get(candidate_id, 0)
        if events > 1:
            out.append(
                Violation("evaluation_duplicated", f"candidate {candidate_id} was evaluated {events} times")
            )
    if run.status == "finished" and run.reported_resolved != len(resolved & in_lineage):
        out.append(
            Violation(
                "evaluation_count_mismatch",
                f"run {run.run_id}: the evolver resolved {run.reported_resolved} candidates, "
                f"the lineage {len(resolved & in_lineage)}",
            )
        )
    if run.status == "finished" and dict(run.rebuilt_archive) != dict(run.evolver_archive):
        out.append(
            Violation(
                "archive_mismatch",
                f"run {run.run_id}: rebuilt from the lineage {dict(sorted(run.rebuilt_archive.items()))}, "
                f"the evolver's {dict(sorted(run.evolver_archive.items()))}",
            )
        )
    return out


def tally(submitted: Sequence[str], runs: Mapping[str, RunLineage], broker: BrokerState) -> Tally:
    """The figures a soak reports: final and completed runs, candidates, lost and duplicated ones."""
    final = [runs[r] for r in submitted if r in runs and runs[r].status in FINAL_STATUSES]
    lost = duplicates = candidates = 0
    for run_id in submitted:
        run = runs.get(run_id)
        in_lineage = set(run.candidate_ids) if run else set()
        created = set(broker.created.get(run_id, ()))
        candidates += len(created | in_lineage)
        resolved = set(run.evaluated_ids) | set(run.failed_build_ids) if run else set()
        lost += len(created - in_lineage) + len(in_lineage - resolved)
        if run is not None:
            duplicates += len(run.candidate_ids) - len(in_lineage)
            duplicates += len(run.evaluated_ids) - len(set(run.evaluated_ids))
        duplicates += sum(max(0, broker.evaluation_events.get(c, 0) - 1) for c in created | in_lineage)
    return Tally(
        runs_final=len(final),
        runs_completed=sum(1 for r in final if r.status == "finished"),
        candidates=candidates,
        candidates_lost=lost,
        duplicates=duplicates,
    )
