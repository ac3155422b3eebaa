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
from kernelfoundry.generators.heuristic.variant import Variant

_NAMED = re.compile(r"`([A-Za-z_][A-Za-z0-9_]*)`")
_SEEDS = (Variant(), Variant(fuse=False, vectorize=False))


def settle(graph: Graph, task: str, backend: str) -> Graph:
    """The graph with nodes the emitters refuse moved to torch, so the default seeds generate.
    Raises UnsupportedGraph (reason `unsupported`) when nothing at all can be generated."""
    for _ in range(len(graph.nodes) + 1):
        try:
            for variant in _SEEDS:
                generate_source(graph, task, backend, variant)
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
