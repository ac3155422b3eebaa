import random
from collections import Counter

from kernelfoundry.domain.archive import Archive
from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.domain.engine import EngineConfig
from kernelfoundry.domain.evaluation import CandidateInfo, EvaluationInfo
from kernelfoundry.domain.landscapes import Landscape, simulate
from kernelfoundry.domain.selection import GuidedSelector, UniformSelector
from kernelfoundry.domain.transitions import TransitionStats, legal_directions


def filled(cells_and_speedups):
    archive = Archive()
    for i, (cell, speedup) in enumerate(cells_and_speedups):
        archive.offer(
            CandidateInfo(f"e{i}", None, Descriptors(*cell)), EvaluationInfo(f"e{i}", True, speedup=speedup)
        )
    return archive


def test_guided_selection_reaches_the_best_cell_in_fewer_evaluations_than_uniform():
    landscape = Landscape.ridge()
    seeds = range(12)
    guided = [simulate(landscape, EngineConfig(selection="guided"), s, 1500).evaluations for s in seeds]
    uniform = [simulate(landscape, EngineConfig(selection="uniform"), s, 1500).evaluations for s in seeds]
    # measured: guided needs about a third of uniform's evaluations; assert with a wide margin
    assert sum(guided) / len(guided) < 0.7 * sum(uniform) / len(uniform)


def test_a_starved_low_fitness_cell_is_still_visited():
    archive = filled([((3, 3, 3), 10.0), ((3, 3, 2), 9.0), ((3, 2, 3), 9.5), ((0, 0, 0), 0.1)])
    stats = TransitionStats()
    for _ in range(30):  # the strong cells have bred many improving children; the weak one none
        stats.record((3, 3, 3), (3, 3, 3), 5.0, 10.0)
    rng = random.Random(0)
    picks = Counter(GuidedSelector().choose(archive, stats, rng).elite.cell for _ in range(300))
    assert picks[(0, 0, 0)] > 0
    assert picks[(3, 3, 3)] > picks[(0, 0, 0)]


def test_epsilon_floor_gives_every_filled_cell_a_minimum_probability():
    archive = filled([((3, 3, 3), 100.0), ((0, 0, 0), 0.001)])
    selector = GuidedSelector(epsilon=0.1)
    weights = selector.weights(archive, TransitionStats())
    assert abs(sum(weights.values()) - 1.0) < 1e-9
    assert weights[(0, 0, 0)] >= 0.1 / 2


def test_visit_bonus_raises_a_cell_that_has_bred_few_children():
    archive = filled([((1, 1, 1), 2.0), ((2, 2, 2), 2.0)])
    stats = TransitionStats()
    for _ in range(20):
        stats.record((1, 1, 1), (1, 1, 1), 2.0, 2.0)  # neutral children only
    weights = GuidedSelector().weights(archive, stats)
    assert weights[(2, 2, 2)] > weights[(1, 1, 1)]


def test_guided_direction_follows_the_improving_move():
    stats = TransitionStats()
    for _ in range(20):
        stats.record((1, 1, 1), (1, 2, 1), 1.0, 2.0)
        stats.record((1, 1, 1), (2, 1, 1), 1.0, 0.5)
    rng = random.Random(1)
    picks = Counter(GuidedSelector().choose_direction((1, 1, 1), stats, rng) for _ in range(200))
    assert picks.most_common(1)[0][0] == ("algorithm", 1)


def test_uniform_selector_picks_filled_cells_and_legal_directions():
    archive = filled([((0, 0, 0), 1.0), ((3, 3, 3), 2.0)])
    rng = random.Random(2)
    for _ in range(50):
        choice = UniformSelector().choose(archive, TransitionStats(), rng)
        assert choice.direction in legal_directions(choice.elite.cell)
    assert UniformSelector().choose(Archive(), TransitionStats(), rng) is None
