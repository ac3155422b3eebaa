"""Emitting one step's fused scalar computation as C statements (shared by the C++ and CUDA emitters).

`emit(graph, step, target, load, root_var)` writes `const float v_<node> = ...;` for every inlined
pointwise node the target needs, in dependency order, each once; leaves are read through `load`, and
the rowop's own value (epilogue) is `root_var`. Pure string building.
"""

from __future__ import annotations

from collections.abc import Callable

from kernelfoundry.generators.heuristic.expressions import expression, literal
from kernelfoundry.generators.heuristic.graph import Graph, Ref
from kernelfoundry.generators.heuristic.plan import Leaf, Step


def var(name: str) -> str:
    return f"v_{name}"


def emit(
    graph: Graph,
    step: Step,
    target: Ref,
    load: Callable[[Leaf], str],
    root_var: str | None = None,
    indent: str = "      ",
) -> tuple[list[str], str]:
    """Statements computing `target` and the expression naming its value."""
    lines: list[str] = []
    done: dict[tuple[str, int], str] = {}

    def value(name: str, trail: int) -> str:
        key = (name, trail)
        if key in done:
            return done[key]
        if root_var is not None and step.epilogue and name == step.root.name:
            done[key] = root_var
            return root_var
        if name in step.inlined:
            node = graph.node(name)
            assert node is not None
            operands = [literal(a) if isinstance(a, float) else value(a.name, a.trail) for a in node.args]
            lines.append(f"{indent}const float {var(name)} = {expression(node.op, operands, node.attrs)};")
            done[key] = var(name)
            return var(name)
        done[key] = load(Leaf(name, trail))
        return done[key]

    result = value(target.name, target.trail)
    return lines, result
