"""Walking a lineage graph level by level, independent of where the candidates are stored.

`walk` is a generator: it yields the candidate ids whose neighbours it needs next and receives the
matching `NodeRow`s, so a synchronous backend (SQLite in its thread) and an asynchronous one (MongoDB)
drive the same walk with one query per level. Breadth first, so each node's depth is its shortest distance
from the root; a node reached twice (two parents sharing an ancestor) is kept once. Pure: must never
import a database driver.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from typing import Literal, NamedTuple

from kernelfoundry.lineage.views import LineageNode

Direction = Literal["ancestors", "descendants"]


class NodeRow(NamedTuple):
    candidate_id: str
    run_id: str
    parent_ids: tuple[str, ...]
    iteration: int


Walk = Generator[list[str], list[NodeRow], tuple[LineageNode, ...]]


def walk(root: NodeRow, direction: Direction, max_depth: int | None = None) -> Walk:
    """Nodes reachable from `root` in `direction`, ordered by (depth, candidate_id).

    For "ancestors" each yielded list holds the ids of the candidates to fetch (the parents of the current
    level); for "descendants" it holds the ids whose children to fetch (the current level itself).
    """
    seen = {root.candidate_id}
    nodes: list[LineageNode] = []
    frontier = [root]
    depth = 0
    while frontier and (max_depth is None or depth < max_depth):
        depth += 1
        if direction == "ancestors":
            wanted = sorted({p for row in frontier for p in row.parent_ids} - seen)
        else:
            wanted = sorted(row.candidate_id for row in frontier)
        if not wanted:
            break
        rows = yield wanted
        frontier = []
        for row in sorted(rows, key=lambda r: r.candidate_id):
            if row.candidate_id in seen:
                continue
            seen.add(row.candidate_id)
            frontier.append(row)
            nodes.append(
                LineageNode(row.candidate_id, row.run_id, tuple(row.parent_ids), row.iteration, depth)
            )
    return tuple(nodes)


def drive(walker: Walk, fetch: Callable[[list[str]], Iterable[NodeRow]]) -> tuple[LineageNode, ...]:
    """Run a walk to its end with a synchronous `fetch`."""
    try:
        wanted = next(walker)
        while True:
            wanted = walker.send(list(fetch(wanted)))
    except StopIteration as done:
        return done.value


def root_node(row: NodeRow) -> LineageNode:
    return LineageNode(row.candidate_id, row.run_id, tuple(row.parent_ids), row.iteration, 0)
