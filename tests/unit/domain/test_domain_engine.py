import random
from collections import Counter

import pytest

from kernelfoundry.domain.archive import Elite
from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.domain.engine import EngineConfig, EvolutionEngine
from kernelfoundry.domain.evaluation import CandidateInfo, EvaluationInfo
from kernelfoundry.domain.islands import IslandModel
from kernelfoundry.domain.landscapes import Landscape, SimulatedGenerator
from kernelfoundry.domain.outcomes import OutcomeKind
from kernelfoundry.tasks.model import Budget


def drive(engine: EvolutionEngine, generations: int, seed: int = 0):
    """Run the engine against a synthetic landscape; return the recorded events in order."""
    rng = random.Random(seed)
    landscape, generator, intended = Landscape.ridge(), SimulatedGenerator(), {}
    events, n = [], 0
    for g in range(generations):
        plans = engine.plan_generation(now=float(g), rng=rng)
        events.append(engine.last_started)
        for plan in plans:
            n += 1
            pair = generator.respond(plan, f"c{n}", landscape, rng, intended)
            engine.record_evaluation(*pair)
            events.append(pair)
    return events


def test_first_generation_seeds_and_later_ones_breed_from_elites():
    engine = EvolutionEngine(EngineConfig(batch_size=3), Budget(iterations=None))
    rng = random.Random(0)
    seeds = engine.plan_generation(0.0, rng)
    assert [p.parent for p in seeds] == [None] * 3 and {p.operator for p in seeds} == {"seed"}
    for i, plan in enumerate(seeds):
        engine.record_evaluation(
            CandidateInfo(
                f"s{i}", None, Descriptors(0, 0, 0), plan.generation, prompt_variant_id=plan.prompt_variant_id
            ),
            EvaluationInfo(f"s{i}", True, speedup=1.0 + i),
        )
    plans = engine.plan_generation(1.0, rng)
    assert all(p.parent is not None and p.parent.candidate_id == "s2" for p in plans)
    assert all(p.direction is not None and p.intent for p in plans)
    assert all(set(p.guidance) == {"common pitfalls", "strategies that worked"} for p in plans)


def test_record_evaluation_is_idempotent_per_candidate():
    engine = EvolutionEngine(EngineConfig(), Budget(iterations=None))
    c = CandidateInfo("a", None, Descriptors(1, 0, 0))
    first = engine.record_evaluation(c, EvaluationInfo("a", True, speedup=2.0))
    again = engine.record_evaluation(c, EvaluationInfo("a", True, speedup=2.0))
    assert first == again and first.kind is OutcomeKind.NEW_CELL
    assert engine.outcomes.total == 1 and engine.budget.evaluations == 1


def test_timed_out_child_never_carries_positive_fitness_nor_enters_the_archive():
    engine = EvolutionEngine(EngineConfig(), Budget(iterations=None))
    engine.record_evaluation(
        CandidateInfo("p", None, Descriptors(0, 0, 0)), EvaluationInfo("p", True, speedup=1.0)
    )
    outcome = engine.record_evaluation(
        CandidateInfo("c", "p", Descriptors(1, 0, 0), operator="tiling"),
        EvaluationInfo("c", True, speedup=50.0, failure_reason="timeout"),
    )
    assert outcome.label == "failed:timeout" and outcome.fitness == 0.0
    assert engine.merged_archive().elite((1, 0, 0)) is None
    assert engine.transitions.counts((0, 0, 0), ("memory", 1)) == (0, 1)
    assert engine.budget.best_fitness == 1.0
    assert engine.dead_ends == 1  # timeouts are not repaired


def test_a_compile_failure_comes_back_as_a_repair_request_at_most_twice():
    engine = EvolutionEngine(EngineConfig(batch_size=1, max_repairs=2), Budget(iterations=None))
    rng = random.Random(0)
    engine.record_evaluation(
        CandidateInfo("p", None, Descriptors(0, 0, 0)), EvaluationInfo("p", True, speedup=1.0)
    )
    engine.record_evaluation(
        CandidateInfo("c0", "p", Descriptors(1, 0, 0)),
        EvaluationInfo("c0", False, failure_reason="compile_error", message="error: nope"),
    )
    for attempt in (1, 2):
        (plan,) = engine.plan_generation(float(attempt), rng)
        assert plan.repair is not None and plan.repair.attempt == attempt
        assert plan.parent is not None and plan.parent.candidate_id == "p"
        assert "error: nope" in plan.repair.feedback
        cid = f"c{attempt}"
        engine.record_evaluation(
            CandidateInfo(
                cid,
                "p",
                Descriptors(1, 0, 0),
                plan.generation,
                operator="repair",
                repair_of=plan.repair.candidate_id,
            ),
            EvaluationInfo(cid, False, failure_reason="compile_error", message="error: nope"),
        )
    (plan,) = engine.plan_generation(3.0, rng)
    assert plan.repair is None
    assert engine.dead_ends == 1


def test_islands_all_advance_and_migrate():
    engine = EvolutionEngine(
        EngineConfig(batch_size=3, islands=4, migration_interval=3, max_repairs=0), Budget(iterations=None)
    )
    events = drive(engine, generations=12)
    planned = Counter(c.island for e in events if isinstance(e, tuple) for c in [e[0]])
    assert set(planned) == {0, 1, 2, 3}
    assert max(planned.values()) - min(planned.values()) <= 1
    assert all(len(a) > 0 for a in engine.islands.archives)
    assert engine.islands.migrations == 4


def test_ring_migration_copies_the_best_elite_to_the_next_island():
    model = IslandModel(count=2, migration_interval=2, migrants=1)
    model.archives[0].offer_elite(Elite("a", (2, 2, 2), 5.0))
    model.archives[1].offer_elite(Elite("b", (1, 1, 1), 1.0))
    assert model.migrate(1) == []
    moves = model.migrate(2)
    assert {(m.source, m.target, m.candidate_id) for m in moves} == {(0, 1, "a"), (1, 0, "b")}
    assert model.archives[1].elite((2, 2, 2)).candidate_id == "a"


def test_replay_rebuilds_the_same_engine_state():
    config = EngineConfig(batch_size=4, islands=2, migration_interval=4, meta_every=3)
    engine = EvolutionEngine(config, Budget(iterations=None))
    events = drive(engine, generations=15, seed=5)
    replayed = EvolutionEngine.replay(events, config, Budget(iterations=None))
    assert replayed.to_dict() == engine.to_dict()
    # replay without explicit generation events still lands on the same archive
    pairs_only = EvolutionEngine.replay(
        [e for e in events if isinstance(e, tuple)], config, Budget(iterations=None)
    )
    assert pairs_only.merged_archive().to_dict() == engine.merged_archive().to_dict()
    assert pairs_only.transitions.to_dict() == engine.transitions.to_dict()
    assert pairs_only.outcomes == engine.outcomes


def test_prompt_variants_co_evolve_during_a_run():
    engine = EvolutionEngine(
        EngineConfig(batch_size=4, meta_every=2, prompt_population=3), Budget(iterations=None)
    )
    drive(engine, generations=20, seed=3)
    summary = engine.summary()
    assert len(summary["prompt_variants"]) == 3
    assert engine.meta.retired, "low-fitness variants are retired during a run"
    assert sum(v["children"] for v in summary["prompt_variants"]) > 0


def test_plan_generation_stops_when_the_budget_is_spent():
    engine = EvolutionEngine(EngineConfig(batch_size=2), Budget(iterations=3))
    rng = random.Random(0)
    assert all(engine.plan_generation(0.0, rng) for _ in range(3))
    assert engine.plan_generation(0.0, rng) == []
    assert engine.stop(0.0).reason == "iterations"


def test_an_evaluation_budget_caps_every_generation_and_counts_what_is_in_flight():
    config, budget = EngineConfig(batch_size=4, max_repairs=0), Budget(iterations=None, evaluations=6)
    engine = EvolutionEngine(config, budget)
    rng = random.Random(0)
    assert len(engine.plan_generation(0.0, rng, in_flight=5)) == 1  # one left beside the 5 in flight
    assert engine.generation == 1
    assert engine.plan_generation(0.0, rng, in_flight=6) == [] and engine.generation == 1
    fresh = EvolutionEngine(config, budget)
    events = drive(fresh, generations=5)
    assert fresh.budget.evaluations == 6 == sum(1 for e in events if isinstance(e, tuple))
    assert fresh.stop(0.0).reason == "evaluations"


def test_a_generation_starts_for_sweep_points_alone_when_they_take_the_last_evaluations():
    config, budget = EngineConfig(batch_size=4, max_repairs=0), Budget(iterations=None, evaluations=6)
    engine = EvolutionEngine(config, budget)
    rng = random.Random(0)
    # 5 in flight and one sweep point beside them: no request is left, but the generation starts
    assert engine.plan_generation(0.0, rng, in_flight=6, beside=1) == [] and engine.generation == 1
    assert engine.last_started is not None and engine.last_started.island_slots == 0
    assert len(engine.plan_generation(0.0, rng, in_flight=4, beside=1)) == 2 and engine.generation == 2


def test_summary_exposes_the_map_and_outcomes():
    engine = EvolutionEngine(EngineConfig(), Budget(iterations=None))
    drive(engine, generations=6)
    s = engine.summary()
    assert s["archive"]["cells_filled"] == len(s["archive"]["cells"]) > 1
    assert sum(s["outcomes"].values()) == s["evaluations"] == 24


def test_engine_config_rejects_unusable_settings():
    with pytest.raises(ValueError, match="batch_size"):
        EngineConfig(batch_size=0)
    with pytest.raises(ValueError, match="selection"):
        EngineConfig(selection="random")  # type: ignore[arg-type]


def test_generation_plan_serialises_to_plain_data():
    engine = EvolutionEngine(EngineConfig(batch_size=4, max_repairs=0), Budget(iterations=None))
    drive(engine, generations=3)
    plan = engine.plan_generation(10.0, random.Random(1))[0]
    assert plan.repair is None and plan.parent is not None
    data = plan.to_dict()
    assert data["generation"] == 4 and data["operator"] == plan.operator
    assert data["parent"]["candidate_id"] == plan.parent.candidate_id
    assert set(data["guidance"]) == {"common pitfalls", "strategies that worked"}


def test_repairs_take_at_most_their_share_of_a_batch_so_islands_keep_advancing():
    engine = EvolutionEngine(EngineConfig(batch_size=4, islands=2, repair_share=0.5), Budget(iterations=None))
    for i in range(6):
        engine.record_evaluation(
            CandidateInfo(f"f{i}", None, Descriptors(0, 0, 0), island=i % 2),
            EvaluationInfo(f"f{i}", False, failure_reason="compile_error", message="error: x"),
        )
    plans = engine.plan_generation(0.0, random.Random(0))
    assert sum(p.repair is not None for p in plans) == 2
    assert {p.island for p in plans if p.repair is None} == {0, 1}
