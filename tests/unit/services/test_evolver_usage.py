"""A run's tokens and cost: summed from its generation events per generator, each request once, carried
by its progress, and rebuilt from the lineage's usage records on resume."""

from __future__ import annotations

from pathlib import Path

from kernelfoundry.services.evolver.resume import restore_run
from kernelfoundry.services.evolver.runs import RunCoordinator
from kernelfoundry.services.store import records
from kernelfoundry.services.store.api import usage_message
from kernelfoundry.v1 import lineage_pb2, search_pb2

from .test_evolver_resume import history_of
from .test_evolver_runs import evaluated, generated, kernel, requests, start


def spent(
    event: search_pb2.CandidatesGenerated, generator: str, prompt: int, completion: int, cost: float
) -> search_pb2.CandidatesGenerated:
    event.generator = generator
    event.usage.prompt_tokens = prompt
    event.usage.completion_tokens = completion
    event.usage.cost_usd = cost
    return event


def usage_records(events: list[search_pb2.CandidatesGenerated]) -> list[lineage_pb2.UsageRecord]:
    """What the store keeps of each answered request, as its history answer carries it."""
    return [usage_message(u) for e in events for u in records.usage_records(e)]


def test_the_progress_sums_every_answered_request_per_generator_and_in_total(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=4)
    (seed_request,) = requests(out)
    answer = spent(generated(seed_request, kernel(1), kernel(2)), "local", 1200, 300, 0.0081)
    runs.on_generated(answer)
    runs.on_evaluated(evaluated(f"{seed_request.request_id}-c0", 1.5))
    following = requests(runs.on_evaluated(evaluated(f"{seed_request.request_id}-c1", 0.8)))
    assert len(following) == 2
    # one answered by the model with nothing usable (its tokens still count), one by the heuristic
    failed = spent(generated(following[0]), "local", 900, 50, 0.0034)
    failed.error_reason = "no_kernel"
    runs.on_generated(failed)
    runs.on_generated(spent(generated(following[1], kernel(3)), "heuristic", 0, 0, 0.0))

    progress = runs.progress(runs.runs["run-1"])
    assert (progress.usage.requests, progress.usage.prompt_tokens, progress.usage.completion_tokens) == (
        3,
        2100,
        350,
    )
    assert progress.usage.cost_usd == 0.0081 + 0.0034
    local = progress.usage_by_generator["local"]
    assert (local.requests, local.prompt_tokens, local.completion_tokens) == (2, 2100, 350)
    heuristic = progress.usage_by_generator["heuristic"]
    assert (heuristic.requests, heuristic.prompt_tokens, heuristic.cost_usd) == (1, 0, 0.0)


def test_an_answer_delivered_twice_is_counted_once(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=4)
    (seed_request,) = requests(out)
    answer = spent(generated(seed_request, kernel(1)), "local", 500, 100, 0.002)
    runs.on_generated(answer)
    runs.on_generated(answer)
    progress = runs.progress(runs.runs["run-1"])
    assert (progress.usage.requests, progress.usage.prompt_tokens) == (1, 500)


def test_a_resumed_run_rebuilds_its_usage_from_the_lineage_and_counts_each_request_once(
    tmp_path: Path,
) -> None:
    runs, out = start(tmp_path, iterations=4)
    (seed_request,) = requests(out)
    seed_answer = spent(generated(seed_request, kernel(1), kernel(2)), "local", 1000, 200, 0.006)
    runs.on_generated(seed_answer)
    runs.on_evaluated(evaluated(f"{seed_request.request_id}-c0", 1.5))
    following = requests(runs.on_evaluated(evaluated(f"{seed_request.request_id}-c1", 2.0)))
    # The store recorded one answer of the next generation; the evolver died before it handled it.
    unhandled = spent(generated(following[0]), "local", 700, 90, 0.0035)
    unhandled.error_reason = "no_kernel"
    history = history_of(runs)
    history.usage.extend(usage_records([seed_answer, unhandled]))

    restored_runs = RunCoordinator(tmp_path / "restored")
    restored = restore_run(restored_runs, history)
    before = restored_runs.progress(restored).usage
    assert (before.requests, before.prompt_tokens, before.completion_tokens) == (2, 1700, 290)
    assert before.cost_usd == 0.006 + 0.0035
    # Its redelivery, and a redelivered seed answer, add nothing; a new answer adds its own.
    restored_runs.on_generated(unhandled)
    restored_runs.on_generated(seed_answer)
    restored_runs.on_generated(spent(generated(following[1], kernel(4)), "local", 10, 5, 0.0001))
    after = restored_runs.progress(restored)
    assert (after.usage.requests, after.usage.prompt_tokens, after.usage.completion_tokens) == (3, 1710, 295)
    assert list(after.usage_by_generator) == ["local"]


def test_the_meta_prompter_s_tokens_are_booked_apart_and_once_across_a_resume(tmp_path: Path) -> None:
    runs, out = start(tmp_path, iterations=4)
    (seed_request,) = requests(out)
    answer = spent(generated(seed_request, kernel(1)), "local", 1000, 250, 0.005)
    answer.meta_generator = "local (meta-prompter)"
    answer.meta_usage.prompt_tokens, answer.meta_usage.completion_tokens = 300, 40
    answer.meta_usage.cost_usd = 0.001
    runs.on_generated(answer)
    progress = runs.progress(runs.runs["run-1"])
    local, meta = (progress.usage_by_generator[n] for n in ("local", "local (meta-prompter)"))
    assert (local.requests, local.prompt_tokens, local.completion_tokens) == (1, 1000, 250)
    assert (meta.requests, meta.prompt_tokens, meta.completion_tokens, meta.cost_usd) == (1, 300, 40, 0.001)
    assert (progress.usage.prompt_tokens, progress.usage.cost_usd) == (1300, 0.005 + 0.001)

    history = history_of(runs)
    history.usage.extend(usage_records([answer]))
    assert [u.usage_id for u in history.usage] == [seed_request.request_id, f"{seed_request.request_id}-meta"]
    restored_runs = RunCoordinator(tmp_path / "restored")
    restored = restore_run(restored_runs, history)
    restored_runs.on_generated(answer)  # redelivered after the restart: counted once
    assert restored_runs.progress(restored).usage_by_generator == progress.usage_by_generator
