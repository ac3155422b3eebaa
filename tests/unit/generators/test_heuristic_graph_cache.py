"""The heuristic generator's captured graphs are bounded: client-chosen task text cannot grow the llm."""

from __future__ import annotations

import pytest

from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.generators.heuristic import proposer as proposer_module
from kernelfoundry.generators.heuristic.graph import Graph
from kernelfoundry.tasks.model import Task


def task(i: int) -> Task:
    return Task(name=f"t{i}", reference_source=f"# task {i}\n")


def test_graphs_are_kept_for_at_most_max_graphs_tasks_least_recently_used_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    captured: list[str] = []
    empty = Graph(inputs=[], nodes=[], outputs=[], shapes={})
    monkeypatch.setattr(proposer_module, "capture", lambda t: captured.append(t.name) or empty)
    generator = HeuristicGenerator()
    for i in range(HeuristicGenerator.MAX_GRAPHS * 10):
        generator.graph(task(i))
    assert len(generator._graphs) == HeuristicGenerator.MAX_GRAPHS
    recent = task(HeuristicGenerator.MAX_GRAPHS * 10 - 1)
    before = len(captured)
    generator.graph(recent)
    assert len(captured) == before  # still cached
    generator.graph(task(0))
    assert len(captured) == before + 1  # evicted long ago: captured again
