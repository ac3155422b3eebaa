from kernelfoundry.domain.archive import ALL_CELLS, Archive, Placement
from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.domain.evaluation import CandidateInfo, EvaluationInfo


def cand(cid: str, cell: tuple[int, int, int], parent: str | None = None) -> CandidateInfo:
    return CandidateInfo(cid, parent, Descriptors(*cell))


def ok(cid: str, speedup: float) -> EvaluationInfo:
    return EvaluationInfo(cid, True, speedup=speedup)


def records():
    return [
        (cand("a", (0, 0, 0)), ok("a", 1.0)),
        (cand("b", (0, 0, 0)), ok("b", 1.5)),
        (cand("c", (0, 0, 0)), ok("c", 1.2)),
        (cand("d", (1, 0, 0)), EvaluationInfo("d", False, speedup=9.0)),
        (cand("e", (1, 0, 0)), EvaluationInfo("e", True, speedup=9.0, failure_reason="timeout")),
        (cand("f", (2, 1, 3)), ok("f", 3.0)),
    ]


def test_archive_keeps_exactly_one_elite_per_cell_the_fastest_correct_one():
    archive = Archive.replay(records())
    assert len(archive) == 2
    assert archive.elite((0, 0, 0)).candidate_id == "b"
    assert archive.elite((2, 1, 3)).speedup == 3.0
    assert len({e.cell for e in archive.elites()}) == len(archive.elites())


def test_incorrect_or_failed_candidate_never_becomes_an_elite_even_with_a_high_speedup():
    archive = Archive.replay(records())
    assert archive.elite((1, 0, 0)) is None
    assert [v.placement for v in archive.history((1, 0, 0))] == [Placement.REJECTED, Placement.REJECTED]
    assert archive.history((1, 0, 0))[1].reason == "timeout"


def test_offer_reports_new_cell_replacement_and_not_better():
    archive = Archive()
    assert archive.offer(cand("a", (0, 1, 0)), ok("a", 1.0)) is Placement.NEW_CELL
    assert archive.offer(cand("b", (0, 1, 0)), ok("b", 2.0)) is Placement.ELITE_REPLACED
    assert (
        archive.offer(cand("c", (0, 1, 0)), ok("c", 2.0)) is Placement.NOT_BETTER
    )  # a tie keeps the incumbent
    assert archive.elite((0, 1, 0)).candidate_id == "b"


def test_replay_rebuilds_the_same_archive():
    archive = Archive.replay(records())
    assert Archive.replay(records()).to_dict() == archive.to_dict()


def test_summary_exposes_the_map_for_drawing():
    summary = Archive.replay(records()).summary()
    assert summary["cells_total"] == len(ALL_CELLS) == 64
    assert summary["cells_filled"] == 2
    assert summary["best"]["candidate_id"] == "f"
    assert {tuple(c["cell"]): c["speedup"] for c in summary["cells"]} == {(0, 0, 0): 1.5, (2, 1, 3): 3.0}
    assert {tuple(c["cell"]): c["visits"] for c in summary["cells"]} == {(0, 0, 0): 3, (2, 1, 3): 1}


def test_history_limit_keeps_only_recent_visits():
    archive = Archive(history_limit=2)
    for i in range(5):
        archive.offer(cand(f"x{i}", (0, 0, 0)), ok(f"x{i}", 1.0 + i))
    assert [v.candidate_id for v in archive.history((0, 0, 0))] == ["x3", "x4"]
    assert archive.visits((0, 0, 0)) == 5
