"""Channels-last conv tails: the conv runs in NHWC, the tail kernel transposes back through a tile.

oneDNN's CPU convolutions are native in NHWC; on NCHW tensors they reorder in and out. When a graph is
a Conv2d followed only by a pointwise chain (after folding its affine tail into the conv), the glue runs
the conv on a channels-last input and passes the NHWC result (`permute(0, 2, 3, 1)`, contiguous) to a
kernel that evaluates the chain while transposing NHWC -> NCHW through a local tile buffer: TILE
positions x TILE channels are read row by row (contiguous in C), staged in an L1-resident tile, and
written channel by channel (contiguous in HW). The output keeps the reference's NCHW layout.

CUDA: cuDNN's float32 convs on NCHW tensors transpose to NHWC and back around its tensor-core kernels
(tests/kernelbench/probe_conv_layouts.py: most of torch.compile's lead on level-2 conv tasks). The same
shape of graph (a 2-D or 3-D conv, forward or transposed, with a pointwise tail whose other operands are
scalars or per-channel, the conv's bias among them: unbias.py) runs the conv on channels-last tensors
and a kernel reads its NHWC output through a 32 x 32 shared tile, coalesced on both sides, writing the
tail's result in NCHW; a tail reduced over the channels (then mapped with scalars) reads each position's
channels as one contiguous row, a warp a position (torch.compile's lead on level2/32's min over the
channels is its channels-last conv feeding such a reduction). Pure string building; never compiles or
runs what it emits.
"""

from __future__ import annotations

from kernelfoundry.generators.heuristic.entry import ptr
from kernelfoundry.generators.heuristic.graph import Graph, Ref, UnsupportedGraph
from kernelfoundry.generators.heuristic.plan import Leaf, Part, Step, reduce_range
from kernelfoundry.generators.heuristic.pools import pool_step, window_taps
from kernelfoundry.generators.heuristic.stepexpr import emit

LAYOUT_TUNABLES = ("// @kf.tunable TILE in [16, 32, 64, 128] default 64",)


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


CUDA_CHANNELS_LAST_CONVS = frozenset({"Conv2d", "Conv3d", "ConvTranspose2d", "ConvTranspose3d"})


def channels_last_source(graph: Graph, parts: list[Part], backend: str = "cpu") -> str | None:
    """The conv output the graph's single pointwise step reads, when the channels-last tail applies:
    CPU, a Conv2d with scalar operands beside it; CUDA, a 2-D or 3-D conv (forward or transposed) with
    scalar or per-channel operands beside it, or (`channel_reduction`) such a step reduced over the
    channels."""
    if len(parts) != 1 or len(parts[0].outputs) != 1:
        return None
    if backend == "cuda" and channel_reduction(graph, parts[0]) is not None:
        return _conv_leaf(graph, parts[0].steps[0], backend)
    if len(parts[0].steps) != 1:
        return None
    step = parts[0].steps[0]
    out_shape = tuple(graph.shapes[step.out])
    if backend == "cuda" and step.kind == "pool" and len(out_shape) in (4, 5):
        # a pooling window over every spatial dim, its consumers' operands scalars or per channel
        after = step.epilogue_leaves(graph)
        if all(
            _numel(tuple(graph.shapes[leaf.name])) == 1 or per_channel(graph, leaf, out_shape)
            for leaf in after
        ):
            return _conv_leaf(graph, step, backend)
        return None
    if step.kind != "pointwise" or len(out_shape) not in ((4,) if backend == "cpu" else (4, 5)):
        return None
    return _conv_leaf(graph, step, backend)


def _conv_leaf(graph: Graph, step: Step, backend: str) -> str | None:
    """The one operand of `step`'s prologue of the prologue's full shape, when it is a conv module's output
    of the kinds the backend's channels-last tail takes and the rest are scalars (CUDA: or per-channel)."""
    src = step.root.args[0] if step.kind in ("reduction", "pool") else Ref(step.root.name)
    if not isinstance(src, Ref):
        return None
    out_shape = tuple(graph.shapes[src.name])
    leaves = step.prologue_leaves(graph)
    full = [leaf for leaf in leaves if _numel(tuple(graph.shapes[leaf.name])) != 1]
    if backend == "cuda":
        full = [leaf for leaf in full if not per_channel(graph, leaf, out_shape)]
    if len(full) != 1 or full[0].trail != 0:
        return None
    node = graph.node(full[0].name)
    if node is None or node.fx_node is None or node.fx_node.op != "call_module":
        return None
    module = graph.modules.get(node.fx_node.target)
    kinds = {"Conv2d"} if backend == "cpu" else CUDA_CHANNELS_LAST_CONVS
    if module is None or type(module).__name__ not in kinds:
        return None
    if tuple(graph.shapes[full[0].name]) != out_shape:
        return None
    return full[0].name


# a reduction over the channels: (its kf_combine / kf_warp_reduce code, its initial value)
CHANNEL_REDUCTIONS = {
    "sum": (0, "0.0f"),
    "mean": (0, "0.0f"),
    "amax": (1, "-INFINITY"),
    "amin": (2, "INFINITY"),
}


def channel_reduction(graph: Graph, part: Part) -> tuple[Step, Step | None] | None:
    """(the reduction, the pointwise step after it or None) when the part reduces a 2-D or 3-D conv's
    pointwise tail over the channels alone (a sum, mean, max or min; the tail's other operands scalars
    or per-channel), then maps the result with scalars at most (CUDA: the channels-last tail reads each
    position's channels as one contiguous row of the conv's NHWC output)."""
    steps = part.steps
    if not steps or len(steps) > 2 or steps[0].kind != "reduction":
        return None
    red = steps[0]
    src = red.root.args[0]
    if red.root.op not in CHANNEL_REDUCTIONS or not isinstance(src, Ref):
        return None
    rank = len(graph.shapes[src.name])
    if rank not in (4, 5) or reduce_range(red.root, rank)[:2] != (1, 2):
        return None
    after = steps[1] if len(steps) == 2 else None
    if after is not None:
        reads = after.prologue_leaves(graph)
        if after.kind != "pointwise" or not any(leaf.name == red.out for leaf in reads):
            return None
        if any(leaf.name != red.out and _numel(tuple(graph.shapes[leaf.name])) != 1 for leaf in reads):
            return None
    if part.outputs != [(after or red).out]:
        return None
    return red, after


def per_channel(graph: Graph, leaf: Leaf, out_shape: tuple[int, ...]) -> bool:
    """Whether `leaf` broadcasts as one value per channel (dim 1) of an output of `out_shape`."""
    shape = tuple(graph.shapes[leaf.name]) + (1,) * leaf.trail
    if len(shape) > len(out_shape):
        return False
    shape = (1,) * (len(out_shape) - len(shape)) + shape
    return shape == tuple(out_shape[1] if d == 1 else 1 for d in range(len(out_shape)))


def _entry_head(part: Part) -> list[str]:
    """A tail entry point's opening: its signature, the operand counts, each input's shape `s_<i>`
    (checked) and data pointer."""
    lines = [
        f"KF_EXPORT int {part.entry_point}(const kf_tensor* inputs, int32_t n_inputs, kf_tensor* outputs,",
        "                              int32_t n_outputs, void* stream) {",
        f"  if (n_inputs != {len(part.inputs)} || n_outputs != 1) return KF_ERR_BAD_ARGUMENTS;",
    ]
    for i, name in enumerate(part.inputs):
        lines.append(f"  kf_shape s_{i};")
        lines.append(
            f"  if (!kf_tensor_ok(&inputs[{i}]) || !kf_shape_of(&inputs[{i}], &s_{i}))"
            " return KF_ERR_BAD_ARGUMENTS;"
        )
        lines.append(f"  const float* {ptr(name)} = KF_DATA(const float, &inputs[{i}]);")
    return lines


def channels_last_entry(graph: Graph, part: Part, source: str) -> list[str]:
    """The entry point: NHWC `source` (and scalar operands) in, the NCHW tail output out."""
    step = part.steps[0]
    out_name = part.outputs[0]
    lines = _entry_head(part)
    loads: dict[Leaf, str] = {}
    for i, name in enumerate(part.inputs):
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


def cuda_channels_last_unit(graph: Graph, part: Part, source: str) -> tuple[str, list[str]]:
    """CUDA: the tail kernel and its entry point: NHWC (NDHWC) `source`, scalar and per-channel
    operands in, the tail's output in NCHW (NCDHW) out. A block stages 32 positions x up to 32 channels:
    it reads them in one coalesced sweep of the NHWC rows (the tail evaluated on the way), and writes
    each channel's 32 positions as one coalesced row of the output. A tail reduced over the channels
    (`channel_reduction`) is `_channel_reduction_unit`'s."""
    reduced = channel_reduction(graph, part)
    if reduced is not None:
        return _channel_reduction_unit(graph, part, source, *reduced)
    step = part.steps[0]
    if step.kind == "pool":
        return _pool_unit(graph, part, source, step)
    out_name = part.outputs[0]
    out_shape = tuple(graph.shapes[out_name])
    rank = len(out_shape)
    params, args, loads = _tail_operands(graph, part, step, source, "c0 + c")
    body, result = emit(graph, step, Ref(step.root.name), lambda leaf: loads[leaf], indent="      ")
    kname = f"{part.entry_point}_nhwc"
    kernel = [
        f"__global__ void __launch_bounds__(256) {kname}(int64_t HW, int64_t C,"
        f" const float* __restrict__ src, float* __restrict__ out"
        + "".join(", " + p for p in params)
        + ") {",
        "  __shared__ float tile[32][33];",
        "  const int64_t n = blockIdx.z, p0 = (int64_t)blockIdx.x * 32, c0 = (int64_t)blockIdx.y * 32;",
        "  const int np = (int)(HW - p0 < 32 ? HW - p0 : 32), nc = (int)(C - c0 < 32 ? C - c0 : 32);",
        "  const float* __restrict__ rows = src + (n * HW + p0) * C + c0;",
        "  for (int e = threadIdx.x; e < np * nc; e += blockDim.x) {",
        "    const int p = e / nc, c = e - p * nc;",
        "    const float v = rows[(int64_t)p * C + c];",
        *body,
        *_tile_out(result),
    ]
    entry = _entry_head(part)
    pointers = {name: f"s_{i}" for i, name in enumerate(part.inputs)}
    x = pointers[source]
    entry += [
        f"  if ({x}.nd != {rank}) return KF_ERR_BAD_ARGUMENTS;",
        f"  const int64_t N = {x}.d[0], C = {x}.d[{rank - 1}], HW = kf_prod(&{x}, 1, {rank - 1});",
    ]
    entry += _operand_checks(graph, part, source)
    entry += [
        "  kf_shape want;",
        f"  want.nd = {rank}; want.d[0] = N; want.d[1] = C;",
        *[f"  want.d[{d}] = {x}.d[{d - 1}];" for d in range(2, rank)],
        "  if (!kf_tensor_ok(&outputs[0]) || !kf_shape_is(&outputs[0], want)) return KF_ERR_BAD_ARGUMENTS;",
        f"  float* {ptr(out_name)} = KF_DATA(float, &outputs[0]);",
        *_tile_launch(kname, ["HW", "C", ptr(source), ptr(out_name), *args]),
    ]
    return "\n".join(kernel), entry


def _pool_unit(graph: Graph, part: Part, source: str, step: Step) -> tuple[str, list[str]]:
    """CUDA: a pooling window (pools.py) over a conv's NHWC (NDHWC) output, its producers evaluated at
    each tap and its consumers at each output: a block takes 32 output positions x up to 32 channels of
    one image; a warp's lanes read one tap's consecutive channels (a coalesced row of the NHWC tensor),
    the block stages the pooled values in a shared tile and writes each channel's 32 positions as one
    coalesced row of the NCHW output. Positions of an image below 2^31 (checked)."""
    window, src = pool_step(graph, step)[:2]
    params, args, loads = _tail_operands(graph, part, step, source, "c0 + c")
    # the conv's value at the tap's position, this thread's channel: one element of an NHWC row
    loads = {leaf: "image[at * C + c]" if load == "v" else load for leaf, load in loads.items()}
    prologue, value = emit(graph, step, src, lambda leaf: loads[leaf], indent="          ")
    outs = {
        leaf: f"{ptr(leaf.name)}[0]"
        if _numel(tuple(graph.shapes[leaf.name])) == 1
        else f"{ptr(leaf.name)}[c0 + c]"
        for leaf in step.epilogue_leaves(graph)
    }
    epilogue, result = (
        emit(graph, step, Ref(step.out), lambda leaf: outs[leaf], "acc", indent="    ")
        if step.epilogue
        else ([], "acc")
    )
    taps = window_taps(window, prologue, value, "    ", unroll=True)
    kname = f"{part.entry_point}_nhwc_pool"
    kernel = [
        f"__global__ void __launch_bounds__(256) {kname}(int64_t HW, int64_t C, int ID, int IH, int IW,"
        " int OH, int OW, const float* __restrict__ src, float* __restrict__ out"
        + "".join(", " + p for p in params)
        + ") {",
        "  __shared__ float tile[32][33];",
        "  const int64_t n = blockIdx.z, p0 = (int64_t)blockIdx.x * 32, c0 = (int64_t)blockIdx.y * 32;",
        "  const int np = (int)(HW - p0 < 32 ? HW - p0 : 32), nc = (int)(C - c0 < 32 ? C - c0 : 32);",
        "  const float* __restrict__ image = src + n * (int64_t)ID * IH * IW * C + c0;",
        "  for (int e = threadIdx.x; e < np * nc; e += blockDim.x) {",
        "    const int p = e / nc, c = e - p * nc, q = (int)(p0 + p);",
        "    const int ow = q % OW, oh = (q / OW) % OH, od = q / OW / OH;",
        *taps,
        *epilogue,
        *_tile_out(result),
    ]
    rank = len(graph.shapes[source])
    x = {name: f"s_{i}" for i, name in enumerate(part.inputs)}[source]
    entry = _entry_head(part)
    entry += [
        f"  if ({x}.nd != {rank}) return KF_ERR_BAD_ARGUMENTS;",
        f"  const int64_t N = {x}.d[0], C = {x}.d[{rank - 1}];",
        "  int64_t ID = 1, IH = 1, IW = 1, OD = 1, OH = 1, OW = 1;",
    ]
    sizes = (("ID", "OD"), ("IH", "OH"), ("IW", "OW"))[3 - window.dims :]
    for i, (inner, outer) in enumerate(sizes):
        unfit, length = window.out_len_c(inner, 3 - window.dims + i)
        entry += [
            f"  {inner} = {x}.d[{1 + i}];",
            f"  if ({unfit}) return KF_ERR_BAD_ARGUMENTS;",
            f"  {outer} = {length};",
        ]
    entry += _operand_checks(graph, part, source)
    entry += [
        "  const int64_t HW = OD * OH * OW;",
        "  if (HW > 2147483647 || ID * IH * IW > 2147483647) return KF_ERR_UNSUPPORTED;",
        "  kf_shape want;",
        f"  want.nd = {rank}; want.d[0] = N; want.d[1] = C;",
        *[f"  want.d[{2 + i}] = {outer};" for i, (_, outer) in enumerate(sizes)],
        "  if (!kf_tensor_ok(&outputs[0]) || !kf_shape_is(&outputs[0], want)) return KF_ERR_BAD_ARGUMENTS;",
        f"  float* {ptr(part.outputs[0])} = KF_DATA(float, &outputs[0]);",
        *_tile_launch(
            kname,
            [
                "HW",
                "C",
                "(int)ID",
                "(int)IH",
                "(int)IW",
                "(int)OH",
                "(int)OW",
                ptr(source),
                ptr(part.outputs[0]),
                *args,
            ],
        ),
    ]
    return "\n".join(kernel), entry


def _tail_operands(
    graph: Graph, part: Part, step: Step, source: str, channel: str
) -> tuple[list[str], list[str], dict[Leaf, str]]:
    """A channels-last tail kernel's operands besides `source` (its parameters, the launch's arguments)
    and the loads of `step`'s prologue: the NHWC element `v`, scalars, per-channel operands at `channel`."""
    loads: dict[Leaf, str] = {}
    for leaf in step.prologue_leaves(graph):
        if leaf.name == source:
            loads[leaf] = "v"
        elif leaf.name not in part.inputs:
            raise UnsupportedGraph(f"`{leaf.name}` is not an input of the channels-last tail")
        elif _numel(tuple(graph.shapes[leaf.name])) == 1:
            loads[leaf] = f"{ptr(leaf.name)}[0]"
        else:
            loads[leaf] = f"{ptr(leaf.name)}[{channel}]"
    others = [name for name in part.inputs if name != source]
    return [f"const float* __restrict__ {ptr(name)}" for name in others], [ptr(n) for n in others], loads


def _operand_checks(graph: Graph, part: Part, source: str) -> list[str]:
    """The entry point's checks that each operand besides `source` holds one value or one a channel
    (`C` in scope, the input shapes `s_<i>` checked)."""
    lines = []
    for i, name in enumerate(part.inputs):
        if name != source:
            want = "1" if _numel(tuple(graph.shapes[name])) == 1 else "C"
            lines.append(f"  if (kf_prod(&s_{i}, 0, s_{i}.nd) != {want}) return KF_ERR_BAD_ARGUMENTS;")
    return lines


def _channel_reduction_unit(
    graph: Graph, part: Part, source: str, red: Step, after: Step | None
) -> tuple[str, list[str]]:
    """CUDA: a tail reduced over the channels, read from the conv's NHWC output: a warp per position,
    its lanes across the position's channels (one contiguous row: a coalesced read), the tail's
    per-channel operands indexed by the channel, the lanes' values combined by shuffles, the map after
    the reduction applied by lane 0 as it writes the position's one value (NCHW and NHWC agree there)."""
    code, init = CHANNEL_REDUCTIONS[red.root.op]
    src = red.root.args[0]
    assert isinstance(src, Ref)
    params, args, loads = _tail_operands(graph, part, red, source, "c")
    body, value = emit(graph, red, src, lambda leaf: loads[leaf], indent="      ")
    result, epilogue = "r", []
    if after is not None:
        after_loads = {
            leaf: "r" if leaf.name == red.out else f"{ptr(leaf.name)}[0]"
            for leaf in after.prologue_leaves(graph)
        }
        epilogue, result = emit(
            graph, after, Ref(after.root.name), lambda leaf: after_loads[leaf], indent="      "
        )
    kname = f"{part.entry_point}_nhwc_red"
    scale = " / (float)C" if red.root.op == "mean" else ""
    kernel = [
        f"__global__ void __launch_bounds__(256) {kname}(int64_t P, int64_t C,"
        " const float* __restrict__ src, float* __restrict__ out" + "".join(", " + p for p in params) + ") {",
        "  const int lane = threadIdx.x & 31;",
        "  const int64_t warps = ((int64_t)gridDim.x * blockDim.x) >> 5;",
        "  for (int64_t p = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5; p < P; p += warps) {",
        "    const float* __restrict__ row = src + p * C;",
        f"    float acc = {init};",
        "    for (int64_t c = lane; c < C; c += 32) {",
        "      const float v = row[c];",
        *body,
        f"      acc = kf_combine<{code}>(acc, {value});",
        "    }",
        f"    acc = kf_warp_reduce<{code}>(acc);",
        "    if (lane == 0) {",
        f"      const float r = acc{scale};",
        *epilogue,
        f"      out[p] = {result};",
        "    }",
        "  }",
        "}",
    ]
    entry = _entry_head(part)
    pointers = {name: f"s_{i}" for i, name in enumerate(part.inputs)}
    x = pointers[source]
    rank = len(graph.shapes[source])
    entry += [
        f"  if ({x}.nd != {rank}) return KF_ERR_BAD_ARGUMENTS;",
        f"  const int64_t C = {x}.d[{rank - 1}], P = kf_prod(&{x}, 0, {rank - 1});",
    ]
    entry += _operand_checks(graph, part, source)
    entry += [
        "  if (!kf_tensor_ok(&outputs[0]) || kf_numel(&outputs[0]) != P) return KF_ERR_BAD_ARGUMENTS;",
        f"  float* {ptr(part.outputs[0])} = KF_DATA(float, &outputs[0]);",
        "  if (P == 0 || C == 0) return KF_OK;",
        "  const int64_t nb = (P * 32 + 255) / 256;",
        f"  {kname}<<<(unsigned)(nb < 65535 * 8 ? nb : 65535 * 8), 256, 0, st>>>"
        f"({', '.join(['P', 'C', ptr(source), ptr(part.outputs[0]), *args])});",
        "  if (cudaGetLastError() != cudaSuccess) return KF_ERR_LAUNCH;",
        "  return KF_OK;",
        "}",
    ]
    return "\n".join(kernel), entry


def _tile_out(result: str) -> list[str]:
    """A tail kernel's end: the element's `result` staged at tile[p][c], then each channel's positions
    written as one coalesced row of the NCHW output (`out`, with n, C, HW, p0, c0, np, nc in scope)."""
    return [
        f"    tile[p][c] = {result};",
        "  }",
        "  __syncthreads();",
        "  const int tx = threadIdx.x & 31;",
        "  for (int c = threadIdx.x >> 5; c < nc; c += blockDim.x >> 5) {",
        "    if (tx < np) out[(n * C + c0 + c) * HW + p0 + tx] = tile[tx][c];",
        "  }",
        "}",
    ]


def _tile_launch(kname: str, args: list[str]) -> list[str]:
    """An entry point's end: `kname` launched over (positions / 32, channels / 32, images) blocks of 256
    threads on the given stream (N, C and HW in scope), the launch checked."""
    return [
        "  if (N * C * HW == 0) return KF_OK;",
        "  if (N > 65535 || (C + 31) / 32 > 65535 || (HW + 31) / 32 > 2147483647) return KF_ERR_UNSUPPORTED;",
        "  const dim3 grid((unsigned)((HW + 31) / 32), (unsigned)((C + 31) / 32), (unsigned)N);",
        f"  {kname}<<<grid, 256, 0, st>>>({', '.join(args)});",
        "  if (cudaGetLastError() != cudaSuccess) return KF_ERR_LAUNCH;",
        "  return KF_OK;",
        "}",
    ]


def to_channels_last_entry(part: Part) -> str:
    """The entry point that writes the channels-last copy of the conv's input (CUDA)."""
    return f"{part.entry_point}_to_nhwc"


def cuda_to_channels_last_unit(entry: str) -> tuple[str, list[str]]:
    """CUDA: a kernel and entry point `entry` that write an NCHW (NCDHW) tensor's channels-last copy,
    (N, C, S...) in, (N, S..., C) out, for the conv's input: through a 32 x 32 shared tile, each channel's
    positions read as one coalesced row, each position's channels written as one (torch's
    `.contiguous(memory_format=torch.channels_last)` took about three times as long on the H200)."""
    kname = f"{entry}_k"
    kernel = [
        f"__global__ void __launch_bounds__(256) {kname}(int64_t C, int64_t HW,"
        " const float* __restrict__ src, float* __restrict__ out) {",
        "  __shared__ float tile[32][33];",
        "  const int64_t n = blockIdx.z, p0 = (int64_t)blockIdx.x * 32, c0 = (int64_t)blockIdx.y * 32;",
        "  const int np = (int)(HW - p0 < 32 ? HW - p0 : 32), nc = (int)(C - c0 < 32 ? C - c0 : 32);",
        "  for (int e = threadIdx.x; e < nc * 32; e += blockDim.x) {",
        "    const int c = e >> 5, p = e & 31;",
        "    if (p < np) tile[c][p] = src[(n * C + c0 + c) * HW + p0 + p];",
        "  }",
        "  __syncthreads();",
        "  for (int e = threadIdx.x; e < np * nc; e += blockDim.x) {",
        "    const int p = e / nc, c = e - p * nc;",
        "    out[(n * HW + p0 + p) * C + c0 + c] = tile[c][p];",
        "  }",
        "}",
    ]
    lines = [
        f"KF_EXPORT int {entry}(const kf_tensor* inputs, int32_t n_inputs, kf_tensor* outputs,",
        "                              int32_t n_outputs, void* stream) {",
        "  if (n_inputs != 1 || n_outputs != 1) return KF_ERR_BAD_ARGUMENTS;",
        "  kf_shape X;",
        "  if (!kf_tensor_ok(&inputs[0]) || !kf_shape_of(&inputs[0], &X)) return KF_ERR_BAD_ARGUMENTS;",
        "  if (X.nd < 3) return KF_ERR_BAD_ARGUMENTS;",
        "  const int64_t N = X.d[0], C = X.d[1], HW = kf_prod(&X, 2, X.nd);",
        "  kf_shape want = X;",
        "  for (int d = 1; d + 1 < X.nd; ++d) want.d[d] = X.d[d + 1];",
        "  want.d[X.nd - 1] = C;",
        "  if (!kf_tensor_ok(&outputs[0]) || !kf_shape_is(&outputs[0], want)) return KF_ERR_BAD_ARGUMENTS;",
        "  const float* src = KF_DATA(const float, &inputs[0]);",
        "  float* out = KF_DATA(float, &outputs[0]);",
        *_tile_launch(kname, ["C", "HW", "src", "out"]),
    ]
    return "\n".join(kernel), lines
