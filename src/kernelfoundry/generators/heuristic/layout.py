"""Channels-last conv tails (CPU): the conv runs in NHWC, the tail kernel transposes back through a tile.

oneDNN's CPU convolutions are native in NHWC; on NCHW tensors they reorder in and out. When a graph is
a Conv2d followed only by a pointwise chain (after folding its affine tail into the conv), the glue runs
the conv on a channels-last input and passes the NHWC result (`permute(0, 2, 3, 1)`, contiguous) to a
kernel that evaluates the chain while transposing NHWC -> NCHW through a local tile buffer: TILE
positions x TILE channels are read row by row (contiguous in C), staged in an L1-resident tile, and
written channel by channel (contiguous in HW). The output keeps the reference's NCHW layout. Pure string
building; never compiles or runs what it emits.
"""

from __future__ import annotations

from kernelfoundry.generators.heuristic.entry import ptr
from kernelfoundry.generators.heuristic.graph import Graph, Ref, UnsupportedGraph
from kernelfoundry.generators.heuristic.plan import Leaf, Part
from kernelfoundry.generators.heuristic.stepexpr import emit

LAYOUT_TUNABLES = ("// @kf.tunable TILE in [16, 32, 64, 128] default 64",)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def channels_last_source(graph: Graph, parts: list[Part]) -> str | None:
    """The Conv2d output the graph's single pointwise step reads, when the channels-last tail applies."""
    if len(parts) != 1 or len(parts[0].steps) != 1 or len(parts[0].outputs) != 1:
        return None
    step = parts[0].steps[0]
    if step.kind != "pointwise" or len(graph.shapes[step.out]) != 4:
        return None
    leaves = step.prologue_leaves(graph)
    full = [leaf for leaf in leaves if _numel(tuple(graph.shapes[leaf.name])) != 1]
    if len(full) != 1 or full[0].trail != 0:
        return None
    node = graph.node(full[0].name)
    if node is None or node.fx_node is None or node.fx_node.op != "call_module":
        return None
    module = graph.modules.get(node.fx_node.target)
    if module is None or type(module).__name__ != "Conv2d":
        return None
    if tuple(graph.shapes[full[0].name]) != tuple(graph.shapes[step.out]):
        return None
    return full[0].name


def channels_last_entry(graph: Graph, part: Part, source: str) -> list[str]:
    """The entry point: NHWC `source` (and scalar operands) in, the NCHW tail output out."""
    step = part.steps[0]
    out_name = part.outputs[0]
    lines = [
        f"KF_EXPORT int {part.entry_point}(const kf_tensor* inputs, int32_t n_inputs, kf_tensor* outputs,",
        "                              int32_t n_outputs, void* stream) {",
        f"  if (n_inputs != {len(part.inputs)} || n_outputs != 1) return KF_ERR_BAD_ARGUMENTS;",
    ]
    loads: dict[Leaf, str] = {}
    for i, name in enumerate(part.inputs):
        lines.append(f"  kf_shape s_{i};")
        lines.append(
            f"  if (!kf_tensor_ok(&inputs[{i}]) || !kf_shape_of(&inputs[{i}], &s_{i}))"
            " return KF_ERR_BAD_ARGUMENTS;"
        )
        lines.append(f"  const float* {ptr(name)} = KF_DATA(const float, &inputs[{i}]);")
        if name == source:
            lines.append(f"  if (s_{i}.nd != 4) return KF_ERR_BAD_ARGUMENTS;")
            lines.append(f"  const kf_shape X = s_{i};")
        else:
            lines.append(f"  if (kf_prod(&s_{i}, 0, s_{i}.nd) != 1) return KF_ERR_BAD_ARGUMENTS;")
            lines.append(f"  const float k_{i} = {ptr(name)}[0];")
    for leaf in step.prologue_leaves(graph):
        if leaf.name == source:
            loads[leaf] = "src[c]"
        elif leaf.name in part.inputs:
            loads[leaf] = f"k_{part.inputs.index(leaf.name)}"
        else:
            raise UnsupportedGraph(f"`{leaf.name}` is not an input of the channels-last tail")
    body, result = emit(graph, step, Ref(step.root.name), lambda leaf: loads[leaf], indent="          ")
    lines += [
        "  const int64_t N = X.d[0], H = X.d[1], W = X.d[2], C = X.d[3], HW = H * W;",
        "  kf_shape want;",
        "  want.nd = 4; want.d[0] = N; want.d[1] = C; want.d[2] = H; want.d[3] = W;",
        "  if (!kf_tensor_ok(&outputs[0]) || !kf_shape_is(&outputs[0], want)) return KF_ERR_BAD_ARGUMENTS;",
        f"  float* {ptr(out_name)} = KF_DATA(float, &outputs[0]);",
        "  const int64_t nblk = (HW + TILE - 1) / TILE;",
        "  #pragma omp parallel for schedule(static)",
        "  for (int64_t t = 0; t < N * nblk; ++t) {",
        "    const int64_t n = t / nblk, p0 = (t % nblk) * TILE;",
        "    const int64_t np = p0 + TILE < HW ? TILE : HW - p0;",
        "    alignas(64) float tile[TILE * TILE];",
        "    for (int64_t c0 = 0; c0 < C; c0 += TILE) {",
        "      const int64_t nc = c0 + TILE < C ? TILE : C - c0;",
        "      for (int64_t p = 0; p < np; ++p) {",
        f"        const float* __restrict src = {ptr(source)} + ((n * HW) + p0 + p) * C + c0;",
        "        #pragma omp simd",
        "        for (int64_t c = 0; c < nc; ++c) {",
        *body,
        f"          tile[p * TILE + c] = {result};",
        "        }",
        "      }",
        "      for (int64_t c = 0; c < nc; ++c) {",
        f"        float* __restrict dst = {ptr(out_name)} + (n * C + c0 + c) * HW + p0;",
        "        #pragma omp simd",
        "        for (int64_t p = 0; p < np; ++p) dst[p] = tile[p * TILE + c];",
        "      }",
        "    }",
        "  }",
        "  (void)stream;",
        "  return KF_OK;",
        "}",
    ]
    return lines
