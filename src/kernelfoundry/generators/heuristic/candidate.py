"""Turning a captured graph and a Variant into one candidate: unit code, glue, tunables, descriptors.

Pure code generation (no compiler, no evaluation). The self-reported descriptors follow the evidence
the emitted code contains: vectorised / float4 access -> memory 1, shared-memory row caching -> 2;
fused steps -> algorithm 1, online softmax -> 2; block barriers -> parallelism 1, warp shuffles -> 2,
atomics -> 3.
"""

from __future__ import annotations

import re

from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.domain.kernel import KernelSource, Tunable, TunableValue
from kernelfoundry.generators.heuristic.cpu import CpuEmitter
from kernelfoundry.generators.heuristic.fold import fold_affine_tails
from kernelfoundry.generators.heuristic.glue import glue_source
from kernelfoundry.generators.heuristic.graph import Graph, UnsupportedGraph
from kernelfoundry.generators.heuristic.plan import partition
from kernelfoundry.generators.heuristic.variant import Variant

_TUNABLE = re.compile(r"^//\s*@kf\.tunable\s+(\w+)\s+in\s+\[([^\]]*)\]\s+default\s+(\S+)\s*$", re.MULTILINE)


def parse_tunables(code: str) -> tuple[Tunable, ...]:
    """The `// @kf.tunable NAME in [..] default ..` declarations of a unit."""
    found = []
    for name, values, default in _TUNABLE.findall(code):
        vals: list[TunableValue] = [_value(v.strip()) for v in values.split(",") if v.strip()]
        found.append(Tunable(name, tuple(vals), _value(default)))
    return tuple(found)


def _value(text: str) -> TunableValue:
    try:
        return int(text)
    except ValueError:
        return text


def descriptors_for(graph: Graph, backend: str, variant: Variant) -> Descriptors:
    folded = False
    if variant.fold:
        graph, folded = fold_affine_tails(graph)
    kinds = {n.kind for n in graph.nodes}
    has_rows = bool(kinds & {"reduction", "rowop"})
    has_softmax = any(n.op in ("softmax", "log_softmax") for n in graph.nodes)
    multi_op = sum(1 for n in graph.nodes if n.kind not in ("heavy", "other")) > 1
    algorithm = 1 if variant.fuse and multi_op else 0
    if (variant.online and has_softmax and backend == "cuda") or folded:
        algorithm = 2
    if backend == "cpu":
        memory = 1 if variant.fuse and variant.vectorize else 0
        return Descriptors(memory=memory, algorithm=algorithm, parallelism=0)
    memory = 1 if variant.vectorize or has_rows else 0
    if variant.cache_rows and any(n.kind == "rowop" for n in graph.nodes):
        memory = 2
    parallelism = 0
    if has_rows:
        parallelism = {"block": 1, "warp": 2, "atomic": 3}.get(variant.reduction, 1)
        if variant.reduction == "atomic" and not any(n.op in ("sum", "mean") for n in graph.nodes):
            parallelism = 2
    return Descriptors(memory=memory, algorithm=algorithm, parallelism=parallelism)


def generate_source(graph: Graph, task_name: str, backend: str, variant: Variant) -> KernelSource:
    """One candidate's KernelSource for the graph; raises UnsupportedGraph when it cannot."""
    fuse = variant.fuse
    if variant.fold:
        graph, _ = fold_affine_tails(graph)
    parts = partition(graph, fuse)
    if not parts:
        raise UnsupportedGraph("the reference has no operation a generated kernel could compute")
    header = [f"// KernelFoundry heuristic proposer: task `{task_name}`, backend {backend}"]
    if backend == "cpu":
        code = CpuEmitter(graph, variant).unit(parts, header)
        language = "cpp"
    elif backend == "cuda":
        from kernelfoundry.generators.heuristic.cuda import CudaEmitter

        code = CudaEmitter(graph, variant).unit(parts, header)
        language = "cuda"
    else:
        raise UnsupportedGraph(f"no emitter for backend `{backend}`")
    glue = glue_source(graph, parts) if graph.has_torch_nodes else ""
    entry = parts[0].entry_point
    return KernelSource(
        language=language, code=code, entry_point=entry, glue=glue, tunables=parse_tunables(code)
    )
