"""CUDA `pool` steps: a fixed pooling window with its pointwise producers and consumers fused (pools.py).

One thread per output, outputs numbered in memory order across the grid (as the op kernels' pooling,
opkernels_cuda.py): a thread evaluates the step's prologue (the pointwise ops that produce the pool's
input) at each in-bounds tap of its window, in registers, combines the taps (max, or a sum divided as
PyTorch divides an average), evaluates the epilogue (the pointwise ops that consume the pool's output)
and writes one value. Operands are full along the pooled dims (a run of them a row, a row being an
(image, channel) pair) or constant along them (one value a row: a conv's bias, a per-channel scale),
located through the row maps every step uses. The window's geometry is baked in, so its loops unroll;
the spatial sizes are the launch's. Pure string building.
"""

from __future__ import annotations

from kernelfoundry.generators.heuristic.entry import ptr, shp
from kernelfoundry.generators.heuristic.graph import Graph, Ref
from kernelfoundry.generators.heuristic.plan import Leaf, Step, row_mode
from kernelfoundry.generators.heuristic.pools import PoolWindow, pool_step, window_taps
from kernelfoundry.generators.heuristic.stepexpr import emit

# outputs a block takes and the most blocks a launch starts (the grid strides over the rest)
POOL_BLOCK = 256
POOL_MAX_BLOCKS = 1 << 20


def _reads(graph: Graph, leaves: list[Leaf], shape: tuple[int, ...], lead: int) -> dict[Leaf, int]:
    modes = {leaf: row_mode(graph, leaf, shape, lead) for leaf in leaves}
    if any(m is None for m in modes.values()):
        raise AssertionError(f"pool step operands the planner should have refused: {modes}")
    return {leaf: int(m) for leaf, m in modes.items() if m is not None}


class PoolKernels:
    """The CUDA emitter's pool steps (mixed into CudaEmitter, whose state they use)."""

    graph: Graph
    kernels: list[str]
    counter: int

    def pool(self, step: Step) -> list[str]:
        g = self.graph
        window, src, xshape, oshape, lead = pool_step(g, step)
        before = _reads(g, step.prologue_leaves(g), xshape, lead)
        after = _reads(g, step.epilogue_leaves(g), oshape, lead) if step.epilogue else {}
        kname = f"kf_step{self.counter}"
        params = [
            "I total",
            "I C",
            "int ID",
            "int IH",
            "int IW",
            "I OD",
            "I OH",
            "I OW",
            "float* __restrict__ out",
        ]
        args = ["total", "C", "ID", "IH", "IW", "OD", "OH", "OW", ptr(step.out)]
        host: list[str] = []
        pre: list[str] = []
        taps: dict[Leaf, str] = {}
        outs: dict[Leaf, str] = {}
        for prefix, reads, loads, space, at in (
            ("p", before, taps, "X", "at"),
            ("e", after, outs, "S", "ot"),
        ):
            for k, (leaf, mode) in enumerate(reads.items()):
                name = f"{prefix}{k}"
                params += [f"const float* __restrict__ {name}", f"kf_rowmap m{name}"]
                args += [ptr(leaf.name), f"m{name}"]
                host += [
                    f"    kf_rowmap m{name};",
                    f"    if (!kf_rowmap_make(kf_trail({shp(leaf.name)}, {leaf.trail}), {space}, {lead},"
                    f" {mode}, &m{name}))"
                    " { rc = KF_ERR_UNSUPPORTED; goto kf_done; }",
                ]
                # rows are (image, channel) pairs (fuse_pools takes batched inputs): the row map's
                # two strides, 0 along a broadcast dim
                offset = f"(int64_t)n * m{name}.strides[0] + (int64_t)c * m{name}.strides[1]"
                if mode:
                    pre.append(f"    const float* __restrict__ q{name} = {name} + {offset};")
                    loads[leaf] = f"__ldg(q{name} + {at})"
                else:
                    pre.append(f"    const float b{name} = {name}[{offset}];")
                    loads[leaf] = f"b{name}"
        prologue, value = emit(g, step, src, lambda leaf: taps[leaf], indent="          ")
        if step.epilogue:
            epilogue, result = emit(g, step, Ref(step.out), lambda leaf: outs[leaf], "acc", indent="    ")
        else:
            epilogue, result = [], "acc"
        self.kernels.append(_kernel(kname, window, params, pre, prologue, value, epilogue, result))
        return [
            f"    const kf_shape X = {shp(src.name)}, S = {shp(step.out)};",
            "    const int64_t total = kf_prod(&S, 0, S.nd);",
            f"    const int64_t C = X.d[{lead - 1}];",
            *_sizes(window, lead),
            *host,
            f"    const int64_t need = (total + {POOL_BLOCK - 1}) / {POOL_BLOCK};",
            f"    const unsigned grid = (unsigned)(need < {POOL_MAX_BLOCKS} ? (need > 0 ? need : 1)"
            f" : {POOL_MAX_BLOCKS});",
            "    if (total > 0) {",
            f"      if (total + (int64_t)grid * {POOL_BLOCK} < ((int64_t)1 << 31))",
            f"        {kname}<int><<<grid, {POOL_BLOCK}, 0, st>>>({', '.join(_cast(args, 'int'))});",
            "      else",
            f"        {kname}<int64_t><<<grid, {POOL_BLOCK}, 0, st>>>({', '.join(_cast(args, 'int64_t'))});",
            "    }",
            "    if (cudaGetLastError() != cudaSuccess) { rc = KF_ERR_LAUNCH; goto kf_done; }",
        ]


def _cast(args: list[str], index: str) -> list[str]:
    """The launch's arguments with the sizes the kernel takes as its index type cast to it."""
    return [f"({index}){a}" if a in ("total", "C", "OD", "OH", "OW") else a for a in args]


def _sizes(window: PoolWindow, lead: int) -> list[str]:
    """Host lines naming the input's (ID, IH, IW) and output's (OD, OH, OW) spatial sizes, 1 in front
    of a 1-D or 2-D pool's."""
    lines = []
    for i, (inner, outer) in enumerate((("ID", "OD"), ("IH", "OH"), ("IW", "OW"))):
        dim = lead + i - (3 - window.dims)
        if dim < lead:
            lines.append(f"    const int {inner} = 1; const int64_t {outer} = 1;")
        else:
            lines.append(f"    const int {inner} = (int)X.d[{dim}]; const int64_t {outer} = S.d[{dim}];")
    return lines


def _kernel(
    kname: str,
    window: PoolWindow,
    params: list[str],
    pre: list[str],
    prologue: list[str],
    value: str,
    epilogue: list[str],
    result: str,
) -> str:
    kd, kh, kw = window.window
    sd, sh, sw = window.stride
    pd, ph, pw = window.padding
    dd, dh, dw = window.dilation
    taps = "\n".join(window_taps(window, prologue, value, "    ", unroll=True))
    if window.dims == 3:
        position = """    const I plane = row / OH;
    const int oh = (int)(row - plane * OH);
    const I nc = plane / OD;
    const int od = (int)(plane - nc * OD);"""
    else:  # one output plane a row: no depth to divide out
        position = """    const I nc = row / OH;
    const int oh = (int)(row - nc * OH), od = 0;"""
    return f"""/* Pool step: window {kd}x{kh}x{kw}, stride {sd}x{sh}x{sw}, padding {pd}x{ph}x{pw}, dilation
   {dd}x{dh}x{dw} ({"max" if window.is_max else "average"}), its producers evaluated at each tap and its
   consumers at each output; a thread per output in memory order. I: int when indices fit 32 bits. */
template <typename I>
__global__ void __launch_bounds__({POOL_BLOCK}) {kname}({", ".join(params)}) {{
  for (I t = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; t < total; t += (I)gridDim.x * (I)blockDim.x) {{
    const I row = t / OW;
    const int ow = (int)(t - row * OW);
{position}
    const I n = nc / C, c = nc - n * C;
    const int64_t ot = (int64_t)t - (int64_t)nc * (int64_t)(OD * OH * OW);
    (void)ot;
{chr(10).join(pre)}
{taps}
{chr(10).join(epilogue)}
    out[t] = {result};
  }}
}}"""
