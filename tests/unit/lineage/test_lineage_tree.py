"""Walking lineage level by level: shortest depths, each node once, depth limits, missing parents."""

from __future__ import annotations

from kernelfoundry.lineage.tree import NodeRow, drive, walk

GRAPH = {
    "a": (),
    "b": ("a",),
    "c": ("a",),
    "d": ("b", "c"),
    "e": ("d", "a"),  # e reaches a directly and through d
    "f": ("ghost",),  # a parent that was never stored
}
ROWS = {cid: NodeRow(cid, "run", parents, len(parents)) for cid, parents in GRAPH.items()}


def by_id(ids: list[str]) -> list[NodeRow]:
    return [ROWS[i] for i in ids if i in ROWS]


def children(ids: list[str]) -> list[NodeRow]:
    return [row for row in ROWS.values() if set(row.parent_ids) & set(ids)]


def test_ancestors_get_their_shortest_depth() -> None:
    nodes = drive(walk(ROWS["e"], "ancestors"), by_id)
    assert [(n.candidate_id, n.depth) for n in nodes] == [("a", 1), ("d", 1), ("b", 2), ("c", 2)]


def test_descendants_reached_twice_are_listed_once() -> None:
    nodes = drive(walk(ROWS["a"], "descendants"), children)
    assert [(n.candidate_id, n.depth) for n in nodes] == [("b", 1), ("c", 1), ("e", 1), ("d", 2)]


def test_max_depth_stops_the_walk() -> None:
    assert [n.candidate_id for n in drive(walk(ROWS["a"], "descendants", 1), children)] == ["b", "c", "e"]
    assert drive(walk(ROWS["a"], "descendants", 0), children) == ()


def test_a_parent_never_stored_is_left_out() -> None:
    assert drive(walk(ROWS["f"], "ancestors"), by_id) == ()


def test_one_fetch_per_level() -> None:
    calls: list[list[str]] = []

    def counting(ids: list[str]) -> list[NodeRow]:
        calls.append(ids)
        return children(ids)

    drive(walk(ROWS["a"], "descendants"), counting)
    assert calls == [["a"], ["b", "c", "e"], ["d"]]
