"""A conv after a depthwise conv (a depthwise-separable conv, MobileNet's block): one CUDA unit, no glue.

The conv family (cuda_conv.py) takes one conv; the op kernels (opkernels.py) take a graph of convs and
nothing else, one entry point each, a dense conv among them as a direct loop (one thread an output:
KernelBench's 86_conv_depthwise_separable_2D ran at 0.05x eager on the H200 so). Here the depthwise conv
is the op kernels' shared-memory depthwise kernel, written into stream-ordered scratch, and the conv that
reads it (with its pointwise tail, if any) is the conv family's implicit GEMM: the unit's `kf_forward`
computes the depthwise output's shape (its stride, padding and dilation baked, as the op kernel's are),
calls the depthwise entry on the scratch and the conv family's entry (`kf_conv_forward`, the family's own
`kf_forward` made static) with the scratch as its input, then frees the scratch on the stream.

`conv_chain(graph)` says whether a graph is such a chain and gives the conv family's view of it: a graph
whose first input is the depthwise conv's output. Pure string building.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelfoundry.generators.heuristic.classify import KEPT_IN_TORCH
from kernelfoundry.generators.heuristic.cpu_conv import ConvPlan, conv_plan
from kernelfoundry.generators.heuristic.cuda import ALLOC
from kernelfoundry.generators.heuristic.cuda_conv import cuda_conv_plan, cuda_conv_unit
from kernelfoundry.generators.heuristic.cuda_depthwise import depthwise_specialised
from kernelfoundry.generators.heuristic.graph import Graph, Ref, Value
from kernelfoundry.generators.heuristic.opkernels import OpKernel, op_kernel
from kernelfoundry.generators.heuristic.opkernels_code import op_entries
from kernelfoundry.generators.heuristic.variant import Variant

_FAMILY_ENTRY = "KF_EXPORT int kf_forward("
_PROLOGUE_ENTRY = "kf_op0"


@dataclass(frozen=True)
class ConvChain:
    """The depthwise conv's op kernel, and the conv family's plan over `conv_graph` (the graph from the
    second conv on, its first input the depthwise conv's output)."""

    prologue: OpKernel
    conv_graph: Graph
    plan: ConvPlan


def conv_chain(graph: Graph) -> ConvChain | None:
    """The chain when the graph is a depthwise conv of a forward input whose output only the conv family's
    conv reads, else None."""
    heavy = [n for n in graph.nodes if n.kind in KEPT_IN_TORCH]
    if len(heavy) != 2 or graph.nodes[:2] != heavy or len(graph.nodes) < 2:
        return None
    first, second = heavy
    prologue = op_kernel(graph, first)
    if prologue is None or not depthwise_specialised(prologue):
        return None
    names = {v.name: v for v in graph.inputs}
    if prologue.inputs[0] not in names or names[prologue.inputs[0]].kind != "input":
        return None
    rest = graph.nodes[1:]
    reads = {a.name for n in rest for a in n.args if isinstance(a, Ref)}
    if second.args != (Ref(first.name),) or reads & set(prologue.inputs) or first.name in graph.outputs:
        return None
    if any(Ref(first.name) in n.args for n in rest[1:]):
        return None
    mid = Value(first.name, "input", 0, tuple(first.shape), first.name)
    kept = [v for v in graph.inputs if v.name not in prologue.inputs]
    conv_graph = Graph(
        inputs=[mid, *kept],
        nodes=list(rest),
        outputs=list(graph.outputs),
        shapes=dict(graph.shapes),
        modules=graph.modules,
        aliases=graph.aliases,
        opaque=graph.opaque,
        constants=graph.constants,
    )
    plan = conv_plan(conv_graph)
    return ConvChain(prologue, conv_graph, plan) if plan is not None else None


def cuda_conv_target(graph: Graph) -> tuple[Graph, ConvPlan] | None:
    """The graph the conv family computes and its plan: the graph's own (one conv), the chain's (a conv
    after a depthwise conv), or None."""
    plan = cuda_conv_plan(graph)
    if plan is not None:
        return graph, plan
    chain = conv_chain(graph)
    return (chain.conv_graph, chain.plan) if chain is not None else None


def conv_family_applies(graph: Graph) -> bool:
    """Whether the conv family serves the graph, alone or after a depthwise conv."""
    return cuda_conv_target(graph) is not None


def conv_family_unit(graph: Graph, variant: Variant, header: list[str]) -> str | None:
    """The conv family's .cu unit for the graph (one conv, or a conv after a depthwise conv), or None."""
    plan = cuda_conv_plan(graph)
    if plan is not None:
        return cuda_conv_unit(graph, plan, variant, header)
    chain = conv_chain(graph)
    return conv_chain_unit(graph, chain, variant, header) if chain is not None else None


def conv_chain_unit(graph: Graph, chain: ConvChain, variant: Variant, header: list[str]) -> str:
    """The whole .cu unit: the conv family's unit (its entry static), the depthwise op kernel's entry and
    the chain's `kf_forward`."""
    family = cuda_conv_unit(chain.conv_graph, chain.plan, variant, header)
    assert family.count(_FAMILY_ENTRY) == 1
    family = family.replace(_FAMILY_ENTRY, "static int kf_conv_forward(")
    lines = [family]
    if ALLOC not in family:
        lines.append(ALLOC)
    lines += [op_entries([(chain.prologue, _PROLOGUE_ENTRY)], "cuda"), _chain_entry(graph, chain)]
    return "\n".join(lines)


def _chain_entry(graph: Graph, chain: ConvChain) -> str:
    index = {v.name: i for i, v in enumerate(graph.inputs)}
    dw = chain.prologue
    dims = int(dw.params["dims"])
    spatial = range(3 - dims, 3)  # the (d, h, w) triples' entries of this conv's spatial dims
    sizes = []
    for i, axis in enumerate(spatial):
        k, s = dw.params["kernel"][axis], dw.params["stride"][axis]
        p, d = dw.params["padding"][axis], dw.params["dilation"][axis]
        sizes += [
            f"  const int64_t r{i} = X->shape[{2 + i}] + {2 * p} - {d * (k - 1) + 1};",
            f"  if (r{i} < 0) return KF_ERR_BAD_ARGUMENTS;",
            f"  shape[{2 + i}] = r{i} / {s} + 1;",
        ]
    first_in = ", ".join(f"inputs[{index[name]}]" for name in dw.inputs)
    conv_in = ", ".join(
        "mid" if name == chain.conv_graph.inputs[0].name else f"inputs[{index[name]}]"
        for name in chain.plan.inputs
    )
    nd = dims + 2
    body = "\n".join(sizes)
    return f"""
/* The chain: the depthwise conv into stream-ordered scratch, then the conv family reading it. */
KF_EXPORT int kf_forward(const kf_tensor* inputs, int32_t n_inputs, kf_tensor* outputs,
                         int32_t n_outputs, void* stream) {{
  if (n_inputs != {len(graph.inputs)} || n_outputs != 1) return KF_ERR_BAD_ARGUMENTS;
  for (int32_t i = 0; i < n_inputs; ++i) if (!kf_tensor_ok(&inputs[i])) return KF_ERR_BAD_ARGUMENTS;
  const kf_tensor* X = &inputs[{index[dw.inputs[0]]}];
  const kf_tensor* Wd = &inputs[{index[dw.inputs[1]]}];
  if (X->ndim != {nd} || Wd->ndim != {nd}) return KF_ERR_BAD_ARGUMENTS;
  int64_t shape[{nd}], strides[{nd}];
  shape[0] = X->shape[0];
  shape[1] = Wd->shape[0];
{body}
  int64_t count = 1;
  for (int i = {nd - 1}; i >= 0; --i) {{
    strides[i] = count;
    count *= shape[i];
  }}
  cudaStream_t st = (cudaStream_t)stream;
  float* scratch = kf_alloc(sizeof(float) * (size_t)(count > 0 ? count : 1), st);
  if (!scratch) return KF_ERR_LAUNCH;
  kf_tensor mid = *X;
  mid.data = scratch;
  mid.byte_offset = 0;
  mid.shape = shape;
  mid.strides = strides;
  const kf_tensor first[] = {{{first_in}}};
  int rc = {_PROLOGUE_ENTRY}(first, {len(dw.inputs)}, &mid, 1, stream);
  if (rc == KF_OK) {{
    const kf_tensor conv[] = {{{conv_in}}};
    rc = kf_conv_forward(conv, {len(chain.plan.inputs)}, outputs, n_outputs, stream);
  }}
  cudaFreeAsync(scratch, st);
  return rc;
}}
"""
