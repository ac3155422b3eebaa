import random

from kernelfoundry.domain.transitions import STAY, TransitionStats, directions_between, legal_directions


def test_directions_and_legality_stay_inside_the_grid():
    assert set(legal_directions((0, 0, 0))) == {STAY, ("memory", 1), ("algorithm", 1), ("parallelism", 1)}
    assert ("memory", 1) not in legal_directions((3, 1, 1))
    assert directions_between((1, 1, 1), (2, 1, 0)) == [("memory", 1), ("parallelism", -1)]
    assert directions_between((1, 1, 1), (1, 1, 1)) == [STAY]


def test_improvement_probability_follows_the_recorded_moves():
    stats = TransitionStats()
    for _ in range(6):
        stats.record((1, 0, 0), (2, 0, 0), 1.0, 1.5)  # memory up keeps improving
        stats.record((1, 0, 0), (1, 1, 0), 1.0, 0.8)  # algorithm up keeps regressing
    stats.record((1, 0, 0), (1, 0, 1), 1.0, 0.0)  # failed child: never an improvement
    assert stats.counts((1, 0, 0), ("memory", 1)) == (6, 6)
    assert stats.counts((1, 0, 0), ("parallelism", 1)) == (0, 1)
    assert stats.probability((1, 0, 0), ("memory", 1)) > 0.8
    assert stats.probability((1, 0, 0), ("algorithm", 1)) < 0.2
    assert stats.best_probability((1, 0, 0)) == stats.probability((1, 0, 0), ("memory", 1))


def test_unvisited_cell_borrows_the_pooled_rate_of_the_direction():
    stats = TransitionStats()
    for _ in range(10):
        stats.record((0, 0, 0), (1, 0, 0), 1.0, 2.0)
    assert stats.counts((0, 2, 2), ("memory", 1)) == (0, 0)
    assert stats.probability((0, 2, 2), ("memory", 1)) > stats.probability((0, 2, 2), ("algorithm", 1))


def test_thompson_samples_are_probabilities_and_reproducible():
    stats = TransitionStats()
    stats.record((0, 0, 0), (1, 0, 0), 1.0, 2.0)
    a = [stats.sample((0, 0, 0), ("memory", 1), random.Random(3)) for _ in range(3)]
    b = [stats.sample((0, 0, 0), ("memory", 1), random.Random(3)) for _ in range(3)]
    assert a == b and all(0.0 <= x <= 1.0 for x in a)


def test_hints_name_the_level_change_and_its_record():
    stats = TransitionStats()
    for improved in (True, True, True, False):
        stats.record((2, 0, 1), (2, 0, 2), 1.0, 1.5 if improved else 0.5)
    hints = stats.hints((2, 1, 1))
    assert hints == [
        "moving parallelism from block barriers to warp/sub-group primitives improved 3 of 4 times"
    ]
    assert stats.hints((0, 0, 0)) == []


def test_the_same_records_rebuild_the_same_stats():
    stats = TransitionStats()
    again = TransitionStats()
    for s in (stats, again):
        s.record((0, 0, 0), (1, 0, 0), 1.0, 2.0)
        s.record((1, 0, 0), (1, 0, 0), 2.0, 1.0)
    assert again.to_dict() == stats.to_dict()
    assert again.probability((0, 0, 0), ("memory", 1)) == stats.probability((0, 0, 0), ("memory", 1))
