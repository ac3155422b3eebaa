"""Settling a captured graph for a backend: what no emitter can write stays in torch.

Capture classifies ops by name; an emitter may still refuse a node it cannot write (a softmax over a
middle dimension, a reduction over dimensions that are not adjacent, an expression it has no form
for). `settle` tries the default seeds (fused, and the direct translation) and, while they fail,
hands one generated node back to torch: the node the failure names, else the last generated one.
Every task then gets candidates as long as one op is left for a generated kernel (a part between
the torch ops, or an op kernel, see opkernels.py). When nothing can be generated, the error says
which operators at which nodes the proposer does not support.

Pure: code generation only, never compiles.
"""

from __future__ import annotations

import re
from dataclasses import replace

from kernelfoundry.generators.heuristic.candidate import generate_source
from kernelfoundry.generators.heuristic.classify import KEPT_IN_TORCH
from kernelfoundry.generators.heuristic.graph import Graph, OpNode, Ref, UnsupportedGraph
from kernelfoundry.generators.heuristic.opkernels import op_kernel
from kernelfoundry.generators.heuristic.variant import Variant

_NAMED = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)`")
_SEEDS = (Variant(), Variant(fuse=False, vectorize=False))


def settle(graph: Graph, task: str, backend: str, reference_source: str = "") -> Graph:
    """The graph with nodes the emitters refuse moved to torch, so the default seeds generate.
    Raises UnsupportedGraph (reason `unsupported`) when nothing at all can be generated. With the
    reference's source, a glue that would perform every operation of the reference (the glue check's
    `glue_reference_fallback`: the generated parts only did what the check does not count) gets the
    torch ops an op-kernel family covers generated too."""
    for _ in range(len(graph.nodes) + 1):
        try:
            for variant in _SEEDS:
                generate_source(graph, task, backend, variant)
            if reference_source:
                graph = _launch_enough(graph, task, backend, reference_source)
            return graph
        except UnsupportedGraph as exc:
            if exc.message.startswith("the proposer does not support"):
                raise
            failure: Exception = exc
        except Exception as exc:  # an emitter's limit (a missing expression, ...): demote and retry
            failure = exc
        demoted = demote(graph, str(failure))
        if demoted is None:
            raise UnsupportedGraph(f"the proposer could not generate `{task}`: {failure}") from failure
        graph = demoted
    raise UnsupportedGraph(f"the proposer could not settle `{task}`")


def demote(graph: Graph, failure: str) -> Graph | None:
    """The graph with one generated node kept in torch instead: the first node `failure` names in
    backticks, else the last generated node. None when no generated node can be replayed by torch."""
    movable = [n for n in graph.nodes if n.kind not in KEPT_IN_TORCH and n.fx_node is not None]
    if not movable:
        return None
    named = set(_NAMED.findall(failure))
    target = next((n for n in movable if n.name in named), movable[-1])
    return replace(graph, nodes=[_in_torch(graph, n) if n is target else n for n in graph.nodes])


def _in_torch(graph: Graph, node: OpNode) -> OpNode:
    """The node as the glue replays it: its fx call, reading every tensor its call reads."""
    refs = tuple(Ref(graph.aliases.get(a.name, a.name)) for a in node.fx_node.all_input_nodes)
    return replace(node, kind="other", args=refs)


def _launch_enough(graph: Graph, task: str, backend: str, reference_source: str) -> Graph:
    from kernelfoundry.evaluation.glue_checks import check_glue

    glue = generate_source(graph, task, backend, Variant()).glue
    if not glue or not any(f.reason == "glue_reference_fallback" for f in check_glue(glue, reference_source)):
        return graph
    covered = frozenset(n.name for n in graph.nodes if n.kind in KEPT_IN_TORCH and op_kernel(graph, n))
    if not covered:
        return graph
    widened = replace(graph, generated_ops=covered)
    try:
        for variant in _SEEDS:
            generate_source(widened, task, backend, variant)
    except Exception:  # the op kernels do not fit this graph: keep what generates
        return graph
    return widened
