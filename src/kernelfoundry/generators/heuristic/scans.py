"""Scan idioms as one scan node (a reformulation, like attention.py and unbias.py).

torch has one scan, `cumsum` (and `cumprod`) from the start of a dim; the other scans are written
around it, and kept so, every piece is a pass over memory of its own (a copy each):

- reverse (suffix) scan: `torch.cumsum(x.flip(d), d).flip(d)`;
- exclusive scan: `torch.cat((torch.zeros_like(x.select(d, 0).unsqueeze(d)),
  torch.cumsum(x.narrow(d, 0, x.size(d) - 1), d)), d)` (each position the sum of those before it);
- masked scan: `torch.cumsum(x * mask, d)` with a bool mask of x's shape;

and the same of `cumprod` (but the exclusive scan, whose head would be ones). `lower_scans` replaces
each such chain by one `cumsum` (`cumprod`) node without an fx node whose attributes say
which scan it is (`dim`, `reverse`, `exclusive`, `masked`) and give the call the glue writes where
it is replayed by torch (`glue`, `{0}` x and `{1}` the mask); the op kernels' scan family
(opkernels.py) generates it in one pass. The chain's other nodes (the flips, the narrow and the
size it reads, the zeros, the product) are dropped once nothing reads them. Pure graph rewriting;
never touches tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kernelfoundry.generators.heuristic.classify import KEPT_IN_TORCH
from kernelfoundry.generators.heuristic.graph import Graph, OpNode, Ref


@dataclass(frozen=True)
class _Scan:
    op: str  # cumsum or cumprod
    result: str  # the node whose value the scan node takes over (its name and place)
    x: str
    mask: str | None
    dim: int
    reverse: bool
    exclusive: bool
    interior: frozenset[str]  # the chain's nodes the scan node replaces


def _argument(node: OpNode, position: int, keyword: str) -> Any:
    fx = node.fx_node
    if keyword in fx.kwargs:
        return fx.kwargs[keyword]
    return fx.args[position] if len(fx.args) > position else None


def _dims(value: Any, rank: int) -> list[int] | None:
    items = list(value) if isinstance(value, tuple | list) else [value]
    if not items or not all(isinstance(d, int) and not isinstance(d, bool) for d in items):
        return None
    return sorted(d % rank for d in items)


def _torch_node(graph: Graph, name: str) -> OpNode | None:
    node = graph.node(name)
    return node if node is not None and node.kind in KEPT_IN_TORCH and node.fx_node is not None else None


def _source(node: OpNode) -> str | None:
    """The tensor a one-operand torch node (flip, narrow, cumsum) reads first."""
    first = node.fx_node.args[0] if node.fx_node.args else node.fx_node.kwargs.get("input")
    if first is None or not hasattr(first, "name") or not node.args:
        return None
    head = node.args[0]
    return head.name if isinstance(head, Ref) and head.trail == 0 else None


def _flip_along(graph: Graph, node: OpNode | None, dim: int) -> bool:
    if node is None or node.op != "flip" or node.fx_node is None:
        return False
    rank = len(node.shape)
    dims = _argument(node, 1, "dims")
    return rank > 0 and _dims(dims, rank) == [dim]


def _scan_of(graph: Graph, cumsum: OpNode) -> _Scan | None:
    """The scan idiom around a torch cumsum node, if any."""
    fx = cumsum.fx_node
    if cumsum.op not in ("cumsum", "cumprod") or fx is None or fx.kwargs.get("dtype") is not None:
        return None
    rank = len(cumsum.shape)
    dims = _dims(_argument(cumsum, 1, "dim"), rank) if rank else None
    src = _source(cumsum)
    if dims is None or len(dims) != 1 or src is None:
        return None
    dim = dims[0]
    interior = {cumsum.name}
    result, reverse, exclusive = cumsum.name, False, False
    feeder = _torch_node(graph, src)
    after = graph.sole_reader(cumsum.name)
    sole = graph.sole_reader(src) is cumsum
    if sole and _flip_along(graph, feeder, dim) and _flip_along(graph, after, dim):
        assert feeder is not None and after is not None
        inner = _source(feeder)
        if inner is None:
            return None
        interior.add(feeder.name)
        result, reverse, src = after.name, True, inner
    elif sole and cumsum.op == "cumsum" and feeder is not None and feeder.op == "narrow":
        whole = _exclusive_source(graph, feeder, cumsum, after, dim)
        if whole is not None:
            assert after is not None
            interior.add(feeder.name)
            result, exclusive, src = after.name, True, whole
    x, mask = src, None
    product = _torch_node(graph, src)
    if product is not None and product.op == "mul" and graph.sole_reader(src) is not None:
        masked = _masked_product(graph, product)
        if masked is not None:
            interior.add(product.name)
            x, mask = masked
    if not (reverse or exclusive or mask):
        return None
    if x in graph.opaque or x not in graph.shapes or tuple(graph.shapes[x]) != tuple(graph.shapes[result]):
        return None
    return _Scan(cumsum.op, result, x, mask, dim, reverse, exclusive, frozenset(interior))


def _exclusive_source(
    graph: Graph, narrow: OpNode, cumsum: OpNode, cat: OpNode | None, dim: int
) -> str | None:
    """x where `narrow` is x.narrow(dim, 0, x.size(dim) - 1) and `cat` joins zeros of x's shape with one
    position along dim, then the cumsum, along dim: an exclusive scan of x."""
    whole = _source(narrow)
    if whole is None or whole not in graph.shapes or cat is None or cat.op != "cat":
        return None
    shape = tuple(graph.shapes[whole])
    if len(shape) != len(cumsum.shape) or shape[dim] < 1:
        return None
    start, length = _argument(narrow, 2, "start"), _argument(narrow, 3, "length")
    narrow_dims = _dims(_argument(narrow, 1, "dim"), len(shape))
    if (
        narrow_dims != [dim]
        or start != 0
        or tuple(narrow.shape) != (*shape[:dim], shape[dim] - 1, *shape[dim + 1 :])
    ):
        return None
    del length  # an fx node (x.size(d) - 1) or a number: the narrow's shape above says what it is
    tensors = _argument(cat, 0, "tensors")
    cat_dims = _dims(_argument(cat, 1, "dim") if _argument(cat, 1, "dim") is not None else 0, len(shape))
    if not isinstance(tensors, tuple | list) or len(tensors) != 2 or cat_dims != [dim]:
        return None
    zeros, scanned = (graph.aliases.get(t.name, t.name) if hasattr(t, "name") else None for t in tensors)
    zero_node = _torch_node(graph, zeros) if zeros else None
    if scanned != cumsum.name or zero_node is None or zero_node.op != "zeros_like":
        return None
    if tuple(zero_node.shape) != (*shape[:dim], 1, *shape[dim + 1 :]) or tuple(cat.shape) != shape:
        return None
    return whole


def _masked_product(graph: Graph, product: OpNode) -> tuple[str, str] | None:
    """(x, mask) where `product` is x * mask of a float tensor and a bool mask of the same shape."""
    import torch

    fx = product.fx_node
    if len(fx.args) != 2 or fx.kwargs:
        return None
    names: list[str] = []
    floats: list[bool] = []
    for a in fx.args:
        meta = a.meta.get("tensor_meta") if hasattr(a, "meta") else None
        if meta is None or not hasattr(meta, "dtype") or tuple(meta.shape) != tuple(product.shape):
            return None
        names.append(graph.aliases.get(a.name, a.name))
        floats.append(meta.dtype == torch.float32)
        if meta.dtype not in (torch.float32, torch.bool):
            return None
    if floats == [True, False]:
        return names[0], names[1]
    if floats == [False, True]:
        return names[1], names[0]
    return None


def _operands(graph: Graph, name: str) -> list[Ref]:
    node = graph.node(name)
    return [a for a in node.args if isinstance(a, Ref)] if node is not None else []


def _glue_call(scan: _Scan) -> str:
    """What the glue writes where the scan node is replayed by torch: `{0}` x, `{1}` the mask."""
    d = scan.dim
    x = "({0} * {1})" if scan.mask else "{0}"
    if scan.reverse:
        return f"torch.{scan.op}({x}.flip({d}), dim={d}).flip({d})"
    if scan.exclusive:
        head = f"torch.zeros_like({x}.narrow({d}, 0, 1))"
        return f"torch.cat(({head}, torch.cumsum({x}.narrow({d}, 0, {x}.size({d}) - 1), dim={d})), dim={d})"
    return f"torch.{scan.op}({x}, dim={d})"


def lower_scans(graph: Graph) -> Graph:
    """The graph with every reverse, exclusive or masked scan idiom as one scan node."""
    scans: dict[str, _Scan] = {}
    claimed: set[str] = set()
    for n in graph.nodes:
        found = _scan_of(graph, n) if n.op in ("cumsum", "cumprod") and n.kind in KEPT_IN_TORCH else None
        if found is None or (found.interior | {found.result}) & claimed:
            continue
        scans[found.result] = found
        claimed |= found.interior | {found.result}
    if not scans:
        return graph
    replaced = set().union(*(s.interior for s in scans.values()))
    nodes: list[OpNode] = []
    for n in graph.nodes:
        scan = scans.get(n.name)
        if scan is not None:
            args = (Ref(scan.x),) if scan.mask is None else (Ref(scan.x), Ref(scan.mask))
            attrs = {
                "dim": scan.dim,
                "reverse": scan.reverse,
                "exclusive": scan.exclusive,
                "masked": scan.mask is not None,
                "glue": _glue_call(scan),
            }
            nodes.append(OpNode(n.name, scan.op, "other", args, attrs, tuple(n.shape), None))
        elif n.name not in replaced:
            nodes.append(n)
    return replace(graph, nodes=_without_dead_torch_nodes(nodes, graph.outputs, replaced | set(scans), graph))


def _without_dead_torch_nodes(
    nodes: list[OpNode], outputs: list[str], chains: set[str], graph: Graph
) -> list[OpNode]:
    """`nodes` less the torch nodes that fed the rewritten chains (`chains`: their nodes in `graph`)
    and that nothing reads any more: x.size(d) - 1, the zeros and the select and unsqueeze before them."""
    feeding: set[str] = set()
    frontier = [a.name for name in chains for a in _operands(graph, name)]
    while frontier:
        name = frontier.pop()
        node = graph.node(name)
        if name in feeding or node is None or node.kind not in KEPT_IN_TORCH or node.fx_node is None:
            continue
        feeding.add(name)
        frontier += [a.name for a in node.args if isinstance(a, Ref)]
    while True:
        read = {a.name for n in nodes for a in n.args if isinstance(a, Ref)} | set(outputs)
        dead = [n for n in nodes if n.name in feeding and n.name not in read]
        if not dead:
            return nodes
        nodes = [n for n in nodes if n not in dead]
