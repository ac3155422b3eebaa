"""The built-in heuristic proposer: graph capture, classification, templates and mutation operators.

Public: HeuristicGenerator (kernelfoundry.generators.base.Generator), capture(), generate_source().
"""

from kernelfoundry.domain.tunables import parse_tunables
from kernelfoundry.generators.heuristic.candidate import descriptors_for, generate_source
from kernelfoundry.generators.heuristic.graph import Graph, UnsupportedGraph, capture
from kernelfoundry.generators.heuristic.proposer import HeuristicGenerator
from kernelfoundry.generators.heuristic.variant import Variant, parse_variant

__all__ = [
    "Graph",
    "HeuristicGenerator",
    "UnsupportedGraph",
    "Variant",
    "capture",
    "descriptors_for",
    "generate_source",
    "parse_tunables",
    "parse_variant",
]
