"""CUDA kernels of the op-kernel families where one thread per item leaves the GPU idle or re-reads
memory: scans, pooling, depthwise convolutions and arg-reductions (see opkernels_code.py for the
families' parameter structs, set-up and the generic item kernel the other families keep).

- scan along a contiguous row: one block per row, 4 consecutive elements a thread (one float4 when the
  row allows), a warp-shuffle scan of the thread totals, a shared-memory scan of the warp totals and the
  carry of the row's earlier chunks; along a strided dim: one thread per column (coalesced across the
  contiguous dim), loads issued 8 steps ahead;
- pooling: one thread per output, outputs numbered in memory order across the whole grid (every lane
  busy however short the output rows), window, stride, padding and dilation baked in so the window
  loops unroll; large windows (SEPARABLE_POOL_TAPS taps or more over several rows) and every 1-D window
  separably, a block's input columns combined over the window's rows in shared memory, then along each
  output; on rows of a multiple of four columns from an aligned input the columns are read a float4
  group at a time, and a window over a few rows takes four outputs a thread from whole float4 window
  rows (`_vpool`), which a 1-D window also has beside its tiles, a tunable choosing;
- depthwise convolution (one input channel per group): cuda_depthwise.py; other convolutions and
  transposed ones (as a gather): one thread per output with the sum in a register (the generic item
  adds every tap into global memory);
- arg-reductions: along a strided dim a block per 32 columns, the reduced dim split into 8 chunks (one
  a warp, loads issued ahead) that meet in shared memory in order (narrow rows: one thread per
  column); along the last dim one warp per row, 4 loads in flight (float4 when aligned), a shuffle
  reduction of (value, index); ties go to the first index as in torch.

Each function returns (kernels, launch): device code placed after the family's struct, and the host
code that ends the entry point after its set-up (which fills `p`, `items` and `cols`). Pure string
building; never compiles.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

from kernelfoundry.generators.heuristic.cuda_depthwise import depthwise_kernels, depthwise_specialised
from kernelfoundry.generators.heuristic.opkernels import OpKernel, declared_tunable, scan_value

_CHECK = "  return cudaGetLastError() == cudaSuccess ? KF_OK : KF_ERR_LAUNCH;\n}"


def _scan(k: OpKernel, e: str) -> tuple[str, str]:
    prod = bool(k.params["prod"])
    reverse, exclusive, masked = (bool(k.params.get(f)) for f in ("reverse", "exclusive", "masked"))
    init = "1.0f" if prod else "0.0f"

    def op(a: str, b: str) -> str:
        return f"({a} * {b})" if prod else f"({a} + {b})"

    # a row's logical position j at its physical offset (reverse: from the row's end)
    at = "L - 1 - j" if reverse else "j"
    quad = "L - 4 - j" if reverse else "j"  # the float4 holding positions j .. j + 3 (rows of 4k)
    mask4 = ""
    if masked:
        mask4 = (
            "\n    const uchar4 b = *reinterpret_cast<const uchar4*>(m + q);"
            "\n    f.x *= (float)b.x; f.y *= (float)b.y; f.z *= (float)b.z; f.w *= (float)b.w;"
        )
    loaded = "make_float4(f.w, f.z, f.y, f.x)" if reverse else "f"
    stored = "make_float4(v3, v2, v1, v0)" if reverse else "make_float4(v0, v1, v2, v3)"
    # what a thread writes at its 4 positions: the scan through each (inclusive) or before each
    outs = (
        ("prefix", op("prefix", "v0"), op("prefix", "v1"), op("prefix", "v2"))
        if exclusive
        else tuple(op("prefix", f"v{i}") for i in range(4))
    )

    def along(step: str) -> str:
        """The offset of a column's step `step` (reverse: counted from the dim's end)."""
        return f"(p.L - 1 - ({step})) * p.inner" if reverse else f"({step}) * p.inner"

    def col_step(step: str, value: str, indent: str) -> str:
        write = f"o[{along(step)}] = acc;"
        add = f"acc = {op('acc', value)};"
        return f"{write}\n{indent}{add}" if exclusive else f"{add}\n{indent}{write}"

    what = " ".join(
        w for w, on in (("reversed", reverse), ("exclusive", exclusive), ("masked", masked)) if on
    )
    title = f"A {what} scan. " if what else ""
    kernels = f"""/* {title}One block per row (rows strided by the grid): chunks of 4 * blockDim.x elements,
   each thread scans its 4 consecutive ones, the warp scans the thread totals by shuffles, warp 0 scans
   the warp totals (double-buffered in shared memory across chunks), the row's carry joins every chunk.
   The next chunk's 4 elements are loaded before this one's barriers, so loads stay in flight. */
__device__ __forceinline__ float {e}_at(const float* __restrict__ x, const unsigned char* __restrict__ m,
                                        int64_t j, int64_t L) {{
  (void)m;
  const int64_t q = {at};
  return {scan_value(k, "x", "m", "q")};
}}

template <bool VEC>
__device__ __forceinline__ float4 {e}_load4(const float* __restrict__ x, const unsigned char* __restrict__ m,
                                            int64_t j, int64_t L) {{
  if (VEC && j + 3 < L) {{
    const int64_t q = {quad};
    float4 f = *reinterpret_cast<const float4*>(x + q);{mask4}
    return {loaded};
  }}
  return make_float4(j < L ? {e}_at(x, m, j, L) : {init}, j + 1 < L ? {e}_at(x, m, j + 1, L) : {init},
                     j + 2 < L ? {e}_at(x, m, j + 2, L) : {init},
                     j + 3 < L ? {e}_at(x, m, j + 3, L) : {init});
}}

template <bool VEC>
__device__ __forceinline__ void {e}_store4(float* __restrict__ o, int64_t j, int64_t L, float v0, float v1,
                                           float v2, float v3) {{
  if (VEC && j + 3 < L) {{
    *reinterpret_cast<float4*>(o + {quad}) = {stored};
    return;
  }}
  if (j < L) o[{at}] = v0;
  if (j + 1 < L) o[{at.replace("j", "(j + 1)")}] = v1;
  if (j + 2 < L) o[{at.replace("j", "(j + 2)")}] = v2;
  if (j + 3 < L) o[{at.replace("j", "(j + 3)")}] = v3;
}}

template <bool VEC>
__global__ void __launch_bounds__(256) {e}_rows(const {e}_p p) {{
  __shared__ float tot[2][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  int buf = 0;
  for (int64_t row = blockIdx.x; row < p.outer; row += gridDim.x) {{
    const float* __restrict__ x = p.x + row * p.L;
    const unsigned char* __restrict__ m = p.m ? p.m + row * p.L : p.m;
    float* __restrict__ o = p.o + row * p.L;
    float carry = {init};
    const int64_t chunk = 4 * (int64_t)blockDim.x;
    float4 next = {e}_load4<VEC>(x, m, 4 * (int64_t)threadIdx.x, p.L);
    for (int64_t c0 = 0; c0 < p.L; c0 += chunk, buf ^= 1) {{
      const int64_t j = c0 + 4 * (int64_t)threadIdx.x;
      const float4 f = next;
      if (c0 + chunk < p.L) next = {e}_load4<VEC>(x, m, j + chunk, p.L);
      float v0 = f.x, v1 = f.y, v2 = f.z, v3 = f.w;
      v1 = {op("v0", "v1")};
      v2 = {op("v1", "v2")};
      v3 = {op("v2", "v3")};
      float t = v3;
      #pragma unroll
      for (int d = 1; d < 32; d <<= 1) {{
        const float n = __shfl_up_sync(0xffffffffu, t, d);
        if (lane >= d) t = {op("n", "t")};
      }}
      float before = __shfl_up_sync(0xffffffffu, t, 1);
      if (lane == 0) before = {init};
      if (lane == 31) tot[buf][warp] = t;
      __syncthreads();
      if (warp == 0) {{
        float w = lane < nw ? tot[buf][lane] : {init};
        #pragma unroll
        for (int d = 1; d < 32; d <<= 1) {{
          const float n = __shfl_up_sync(0xffffffffu, w, d);
          if (lane >= d) w = {op("n", "w")};
        }}
        tot[buf][lane] = w;
      }}
      __syncthreads();
      const float prefix = {op(f"(warp > 0 ? {op('carry', 'tot[buf][warp - 1]')} : carry)", "before")};
      {e}_store4<VEC>(o, j, p.L, {", ".join(outs)});
      carry = {op("carry", "tot[buf][nw - 1]")};
    }}
  }}
}}

/* Along a strided dim: one thread per column, neighbours on neighbouring columns, 8 loads in flight. */
__global__ void __launch_bounds__(256) {e}_cols(const {e}_p p) {{
  const int64_t total = p.outer * p.inner, step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total; t += step) {{
    const int64_t i = t % p.inner, base = (t / p.inner) * p.L * p.inner + i;
    const float* __restrict__ x = p.x + base;
    const unsigned char* __restrict__ m = p.m ? p.m + base : p.m;
    (void)m;
    float* __restrict__ o = p.o + base;
    float acc = {init};
    int64_t l = 0;
    for (; l + 8 <= p.L; l += 8) {{
      float v[8];
      #pragma unroll
      for (int u = 0; u < 8; ++u) v[u] = {scan_value(k, "x", "m", along("l + u"))};
      #pragma unroll
      for (int u = 0; u < 8; ++u) {{
        {col_step("l + u", "v[u]", "        ")}
      }}
    }}
    for (; l < p.L; ++l) {{
      {col_step("l", scan_value(k, "x", "m", along("l")), "      ")}
    }}
  }}
}}"""
    aligned = " && ((uintptr_t)p.m) % 4 == 0" if masked else ""
    launch = f"""  (void)cols;
  if (items <= 0 || p.L <= 0) return KF_OK;
  cudaStream_t st = (cudaStream_t)stream;
  if (p.inner == 1) {{
    const int64_t quads = (p.L + 3) / 4;
    const int threads = quads >= 256 ? 256 : (int)((quads + 31) / 32 * 32);
    const unsigned nb = (unsigned)(p.outer < 1048576 ? p.outer : 1048576);
    const int vec = p.L % 4 == 0 && ((uintptr_t)p.x) % 16 == 0 && ((uintptr_t)p.o) % 16 == 0{aligned};
    if (vec) {e}_rows<true><<<nb, threads, 0, st>>>(p);
    else {e}_rows<false><<<nb, threads, 0, st>>>(p);
  }} else {{
    const int64_t nb = (items + 255) / 256;
    {e}_cols<<<(unsigned)(nb < 1048576 ? nb : 1048576), 256, 0, st>>>(p);
  }}
{_CHECK}"""
    return kernels, launch


def pool_specialised(k: OpKernel) -> bool:
    """Pooling with a fixed window (not adaptive) gets the baked kernel."""
    return not k.params["adaptive"]


# Windows of at least this many taps spanning more than one input row are pooled separably (_spool).
SEPARABLE_POOL_TAPS = 32
# Input columns of one separable tile (floats of shared memory) and the most outputs it takes: up to
# sixteen a thread, so that a tile's fixed costs (its place, two barriers) are shared by more outputs
# than a 1-D pooling's one a thread (level1/41_Max_Pooling_1D: 6.4 ms at 256 outputs a tile on the H200,
# 25% of the bandwidth floor; 4.1 ms at 1024), and a thread of the float4 column pass has four groups
# of a long row in flight (at 2048 columns a tile it had one: 16 bytes, fewer than the scalar pass's
# five columns)
POOL_SPAN = 4096
POOL_TILE_OUTPUTS = 4096


def pool_separable(k: OpKernel) -> bool:
    """A fixed window large enough that a thread per output would issue many scattered loads, or any
    window of a 1-D pooling: there the tile's span is the input row itself, read once with coalesced
    loads, and the output's index arithmetic (four integer divisions an output in the thread-per-output
    kernel, which ran a 1.6 G-output MaxPool1d at 21% of the bandwidth floor on the H200) is done once a
    block."""
    kd, kh, kw = k.params["window"]
    if not pool_specialised(k):
        return False
    if kd * kh == 1:
        return kw > 1
    return kd * kh * kw >= SEPARABLE_POOL_TAPS


def _pool_tile(k: OpKernel) -> tuple[int, int]:
    """(outputs a separable tile, input columns it spans): at most POOL_TILE_OUTPUTS outputs and
    POOL_SPAN - 3 columns. The float4 column pass starts at the aligned group before the span's first
    column, up to 3 columns ahead of it, so the span and that shift fill at most POOL_SPAN / 4 groups:
    one pass of POOL_VEC_LOADS_IN_FLIGHT groups a thread. At POOL_SPAN columns, three of four tiles of a
    1-D pooling took a second pass for one group, a whole load latency for the block at its barrier."""
    _, _, kw = k.params["window"]
    _, _, sw = k.params["stride"]
    _, _, dw = k.params["dilation"]
    ext = (kw - 1) * dw + 1
    tw = max(1, min(POOL_TILE_OUTPUTS, (POOL_SPAN - 3 - ext) // sw + 1))
    return tw, (tw - 1) * sw + ext


# Loads a thread of the separable pooling's column pass issues before storing (its columns times the
# window's (d, h) taps). On the H200 (bench/results/h200_2026-12-04e/): a 1-D pooling at five columns a
# thread, 41_Max_Pooling_1D 4.50 -> 4.09 ms and 44_Average_Pooling_1D 2.61 -> 2.29 ms; an 11-row window
# at three columns (33 loads), 45_Average_Pooling_2D 5.71 -> 6.50 ms: eleven loads a column are enough
POOL_LOADS_IN_FLIGHT = 8
# The most columns a thread of the scalar column pass takes: at seven and more ptxas (CUDA 13, sm_90)
# spilled the 1-D pass's column array at 40 registers
POOL_SCALAR_COLUMNS = 6
# float4 loads a thread of the float4 column pass keeps in flight (64 bytes, the scalar pass's 32 and
# more; at 8, ptxas spilled a two-row window's pass)
POOL_VEC_LOADS_IN_FLIGHT = 4


def _pool_columns(k: OpKernel, span: int) -> int:
    """Columns a thread of the separable column pass loads at once: as many as keep at most
    POOL_LOADS_IN_FLIGHT loads in flight, no more than the tile's span needs of a 256-thread block."""
    kd, kh, _ = k.params["window"]
    return max(1, min(POOL_LOADS_IN_FLIGHT // (kd * kh), -(-span // 256), POOL_SCALAR_COLUMNS))


def _pool_groups(k: OpKernel, span: int) -> int:
    """Groups of four columns a thread of the float4 column pass loads at once: as many as keep at most
    POOL_VEC_LOADS_IN_FLIGHT float4 loads in flight, no more than the span's groups need."""
    kd, kh, _ = k.params["window"]
    return max(1, min(POOL_VEC_LOADS_IN_FLIGHT // (kd * kh), -(-(span + 3) // 1024)))


# Outputs a thread of the row-vector pooling takes (consecutive along the row), and the most float4
# loads a window row may take for them (beyond it the thread-per-output kernel is kept).
VPOOL_OUTPUTS = 4
VPOOL_MAX_LOADS = 8
# float4 loads of window rows a `_vpool` thread issues before their math (whole rows, at least one)
VPOOL_LOADS_IN_FLIGHT = 16


def _vpool_loads(k: OpKernel) -> int:
    """float4 loads a window row of the row-vector pooling takes: the VPOOL_OUTPUTS outputs' columns
    from the aligned group before the first; their first column is `(-pw) & 3` past a group's start
    (VPOOL_OUTPUTS * sw is a multiple of 4, so every thread's first output starts alike)."""
    _, _, kw = k.params["window"]
    _, _, sw = k.params["stride"]
    _, _, pw = k.params["padding"]
    _, _, dw = k.params["dilation"]
    span = (-pw) % 4 + (VPOOL_OUTPUTS - 1) * sw + (kw - 1) * dw + 1
    return -(-span // 4)


def pool_vectorised(k: OpKernel) -> bool:
    """A fixed window whose window rows take few enough float4 loads for the row-vector kernel: four
    outputs a thread from whole float4 row reads (at run time: rows of a multiple of four columns from a
    16-byte aligned input). Small windows over (d, h) rows take it; a 1-D window has it beside the
    separable tiles, a tunable choosing (`pool_tiled_tunable`)."""
    kd, kh, _ = k.params["window"]
    small = not pool_separable(k) and kd * kh > 1
    return pool_specialised(k) and (small or kd * kh == 1) and _vpool_loads(k) <= VPOOL_MAX_LOADS


def pool_tiled_tunable(k: OpKernel, entry: str) -> str | None:
    """The tunable of a pooling that has both the separable tiles and the row-vector kernel (a 1-D
    window): 1 the tiles (shared memory, one barrier pair a tile), 0 the row-vector kernel (no shared
    memory, the window's overlap read again from L1). Which is faster depends on the window and the
    device, so the sweep decides."""
    kd, kh, _ = k.params["window"]
    if pool_separable(k) and pool_vectorised(k) and kd * kh == 1:
        return f"KF_TILED_{entry.upper()}"
    return None


# Outputs a thread of the 1-D tiles' run path takes (odd: the runs' reads and stores in shared memory
# fall on distinct banks), and the longest window it keeps in registers (RUN + kw - 1 columns).
POOL_RUN = 7
POOL_RUN_MAX_WINDOW = 16


def pool_runs_tunable(k: OpKernel, entry: str) -> str | None:
    """The tunable of the 1-D tiles' run path (`_pool_runs`): a 1-D window of stride 1, at most
    POOL_RUN_MAX_WINDOW taps. The output pass of a tile took the whole instruction budget of its loads
    (8 shared-memory reads, 8 bounds checks and the index arithmetic an output of level1/41's window of 8),
    the run path about a quarter of it. On by default: on the H100 it took level1/41's kernel from 3.16
    to 2.92 ms and 44's from 1.92 to 1.64 (bench/results/h100_2026-12-07c/); 0, the output loop, swept."""
    kd, kh, kw = k.params["window"]
    if pool_separable(k) and kd * kh == 1 and k.params["stride"][2] == 1 and kw <= POOL_RUN_MAX_WINDOW:
        return f"KF_POOL_RUNS_{entry.upper()}"
    return None


def _pool_runs(k: OpKernel, t: _PoolText, runs: str, span: int) -> str:
    """A 1-D tile's output pass where every tap of every output lies inside the row (`wb >= 0 &&
    wb + span <= IW`): runs of POOL_RUN outputs of one residue modulo the dilation, a run's
    POOL_RUN + kw - 1 columns read from shared memory once into registers and each output combined from
    them without bounds checks; the outputs staged in `outv` and stored by consecutive lanes. Outside
    the row's interior (its first and last tiles), the output loop that follows."""
    kw, dw = t.window[2], t.dilation[2]
    width = POOL_RUN + kw - 1
    finish = ""
    if not k.params["max"]:
        # the window lies inside the row: the divisor is the window's taps, or the one given
        finish = f"\n            acc = acc * {1.0 / float(k.params.get('divisor') or kw)!r}f;"
    return f"""
#if {runs}
    if (wb >= 0 && wb + span <= IW) {{
      /* interior tile: runs of {POOL_RUN} outputs of one residue modulo the dilation ({dw}), their
         {width} columns read once into registers */
      const int runs = (n + {dw * POOL_RUN - 1}) / {dw * POOL_RUN} * {dw};
      for (int gi = threadIdx.x; gi < runs; gi += blockDim.x) {{
        const int q0 = (gi / {dw}) * {dw * POOL_RUN} + gi % {dw};
        float win[{width}];
        #pragma unroll
        for (int c = 0; c < {width}; ++c) {{
          const int j = sh + q0 + c * {dw};
          win[c] = j < {span + 8} ? colv[j] : 0.0f;  /* columns past the span feed no output */
        }}
        #pragma unroll
        for (int r = 0; r < {POOL_RUN}; ++r) {{
          const int q = q0 + r * {dw};
          if (q < n) {{
            float acc = {t.neutral};
            #pragma unroll
            for (int c = 0; c < {kw}; ++c) {{
              const float v = win[r + c];
              {t.combine}
            }}{finish}
            outv[q] = acc;
          }}
        }}
      }}
      __syncthreads();
      for (int q = threadIdx.x; q < n; q += blockDim.x) p.o[row * OW + ow0 + q] = outv[q];
    }} else
#endif"""


def _window_rows(k: OpKernel, body: str, indent: str, counting: str = "") -> str:
    """The pooling window's (d, h) rows inside the input, `body` once a row (`d`, `h` in scope; d0, h0,
    ID, IH at the call site), indented by `indent`; `counting` runs first in each row."""
    kd, kh, _ = k.params["window"]
    dd, dh, _ = k.params["dilation"]
    inner = textwrap.indent(textwrap.dedent(body).strip("\n"), "    ")
    return textwrap.indent(
        f"""#pragma unroll
for (int a = 0; a < {kd}; ++a) {{
  const int d = d0 + a * {dd};
  if (d < 0 || d >= ID) continue;
  #pragma unroll
  for (int b = 0; b < {kh}; ++b) {{
    const int h = h0 + b * {dh};
    if (h < 0 || h >= IH) continue;{counting}
{inner}
  }}
}}""",
        indent,
    )


def _lanes(statement: str) -> str:
    """A combine statement of `acc` and `v` written once for each lane of a float4."""
    return " ".join(re.sub(r"\b(acc|v)\b", rf"\1.{lane}", statement) for lane in "xyzw")


@dataclass(frozen=True)
class _PoolText:
    """The code every kernel of one pooling window shares: the window (baked), the neutral value, how a
    value `v` enters `acc`, the count of a valid tap (an average over valid taps) and the division."""

    window: tuple[int, int, int]
    stride: tuple[int, int, int]
    padding: tuple[int, int, int]
    dilation: tuple[int, int, int]
    neutral: str
    combine: str
    count: str
    finish: str
    geometry: str


def _pool_text(k: OpKernel) -> _PoolText:
    """The shared pieces of a max or an average (its divisor: given, the padded window's, or the count
    of its valid taps)."""
    p = k.params
    kd, kh, kw = p["window"]
    sd, sh, sw = p["stride"]
    pd, ph, pw = p["padding"]
    dd, dh, dw = p["dilation"]
    shape = (p["window"], p["stride"], p["padding"], p["dilation"])
    geometry = (
        f"Window {kd}x{kh}x{kw}, stride {sd}x{sh}x{sw}, padding {pd}x{ph}x{pw}, dilation {dd}x{dh}x{dw}:"
        " baked, the loops unroll."
    )
    if p["max"]:
        return _PoolText(*shape, "-INFINITY", "acc = (v > acc || v != v) ? v : acc;", "", "", geometry)
    if p.get("divisor"):
        div = f"{float(p['divisor'])!r}f"
    elif p.get("include_pad", 1):
        # PyTorch: the window clipped to the padded input, before clipping to the input
        div = (
            f"(float)((min(d0 + {kd}, ID + {pd}) - d0) * (min(h0 + {kh}, IH + {ph}) - h0)"
            f" * (min(w0 + {kw}, IW + {pw}) - w0))"
        )
    else:
        div = "(float)(cnt > 0 ? cnt : 1)"
    return _PoolText(*shape, "0.0f", "acc += v;", " ++cnt;", f"\n    acc = acc / {div};", geometry)


def _counts_valid_taps(k: OpKernel) -> bool:
    """An average over the window's valid taps only (no divisor given, the padding excluded)."""
    p = k.params
    return not p["max"] and not p.get("divisor") and not p.get("include_pad", 1)


def _pool(k: OpKernel, e: str) -> tuple[str, str]:
    """The pooling unit: a thread per output always, and beside it the row-vector kernel and the
    separable tiles where the window suits them; the launch chooses at run time."""
    t = _pool_text(k)
    kernels = _pool_per_output(k, e, t)
    vectorised, separable = pool_vectorised(k), pool_separable(k)
    runs = pool_runs_tunable(k, e)
    if vectorised:
        kernels += _pool_row_vector(k, e, t)
    if separable:
        kernels += _pool_tiles(k, e, t, runs)
    tiled = pool_tiled_tunable(k, e)
    if tiled:
        kernels = declared_tunable(tiled, (1, 0), 1) + "\n" + kernels
    if runs:
        kernels = declared_tunable(runs, (1, 0), 1) + "\n" + kernels
    return kernels, _pool_launch(k, e, tiled, separable, vectorised)


def _pool_per_output(k: OpKernel, e: str, t: _PoolText) -> str:
    """One thread per output: every window, any geometry."""
    kw = t.window[2]
    sd, sh, sw = t.stride
    pd, ph, pw = t.padding
    dw = t.dilation[2]
    pool_row = f"""
        const float* __restrict__ xr = xc + ((int64_t)d * IH + h) * IW;
        #pragma unroll
        for (int c = 0; c < {kw}; ++c) {{
          const int w = w0 + c * {dw};
          if (w < 0 || w >= IW) continue;
          const float v = __ldg(xr + w);
          {t.combine}{t.count}
        }}"""
    return f"""/* One thread per output, outputs numbered in memory order (n, c, d, h, w): consecutive
   lanes take consecutive outputs, so every lane works however short the output rows are (a block per
   row left 21 of 32 lanes idle on an 11-wide output), neighbouring lanes read neighbouring windows and
   the grid strides over everything. I: int when the indices fit 32 bits, else int64_t. {t.geometry} */
template <typename I>
__global__ void __launch_bounds__(256) {e}_pool(const {e}_p p, I total) {{
  const int ID = (int)p.in[0], IH = (int)p.in[1], IW = (int)p.in[2];
  const I OD = (I)p.out[0], OH = (I)p.out[1], OW = (I)p.out[2];
  for (I t = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; t < total; t += (I)gridDim.x * (I)blockDim.x) {{
    const I row = t / OW;
    const int ow = (int)(t - row * OW), oh = (int)(row % OH), od = (int)((row / OH) % OD);
    const int64_t nc = (int64_t)(row / (OH * OD));
    const float* __restrict__ xc = p.x + nc * ID * IH * (int64_t)IW;
    const int d0 = od * {sd} - {pd}, h0 = oh * {sh} - {ph}, w0 = ow * {sw} - {pw};
    float acc = {t.neutral};
    int cnt = 0;
    (void)cnt;
{_window_rows(k, pool_row, "    ")}{t.finish}
    p.o[t] = acc;
  }}
}}"""


def _pool_row_vector(k: OpKernel, e: str, t: _PoolText) -> str:
    """`_vpool`: four consecutive outputs a thread from whole float4 window rows, the loads of whole
    rows, up to VPOOL_LOADS_IN_FLIGHT, issued before their math (rows skipped by a branch, each row's
    math before the next row's loads, kept one row's loads in flight a thread)."""
    neutral = t.neutral
    kd, kh, kw = t.window
    sd, sh, sw = t.stride
    pd, ph, pw = t.padding
    dd, dh, dw = t.dilation
    loads, lead, v_out = _vpool_loads(k), (-pw) % 4, VPOOL_OUTPUTS
    rows = kd * kh
    most = max(1, VPOOL_LOADS_IN_FLIGHT // loads)
    batch = -(-rows // -(-rows // most))  # as even as the batches can be: 9 rows at most 4 a batch, 3 of 3
    counting, count_out = "", ""
    if _counts_valid_taps(k):
        counting = "\n        rows_in += row_in;"
        count_out = f"""
      int cnt = 0;
      #pragma unroll
      for (int c = 0; c < {kw}; ++c) {{
        const int w = w0 + c * {dw};
        cnt += (w >= 0 && w < IW) ? rows_in : 0;
      }}"""
    row_of = f"""const int rr = r0 + i, d = d0 + rr / {kh} * {dd}, h = h0 + rr % {kh} * {dh};
        const bool row_in = rr < {rows} && d >= 0 && d < ID && h >= 0 && h < IH;"""
    window = f"""    #pragma unroll
    for (int r0 = 0; r0 < {rows}; r0 += {batch}) {{
      float4 q[{batch}][{loads}];
      #pragma unroll
      for (int i = 0; i < {batch}; ++i) {{
        {row_of}
        const float* __restrict__ xr = xc + ((int64_t)d * IH + h) * IW;
        #pragma unroll
        for (int g = 0; g < {loads}; ++g) {{
          const int w = a0 + 4 * g;
          q[i][g] = (row_in && w >= 0 && w < IW) ? __ldg(reinterpret_cast<const float4*>(xr + w))
                                                 : make_float4({neutral}, {neutral}, {neutral}, {neutral});
        }}
      }}
      #pragma unroll
      for (int i = 0; i < {batch}; ++i) {{
        {row_of}{counting}
        (void)row_in;
        float r[{loads * 4}];
        #pragma unroll
        for (int g = 0; g < {loads}; ++g) {{
          r[4 * g] = q[i][g].x; r[4 * g + 1] = q[i][g].y; r[4 * g + 2] = q[i][g].z; r[4 * g + 3] = q[i][g].w;
        }}
        #pragma unroll
        for (int o = 0; o < {v_out}; ++o) {{
          float acc = out[o];
          #pragma unroll
          for (int c = 0; c < {kw}; ++c) {{
            const float v = r[{lead} + o * {sw} + c * {dw}];
            {t.combine}
          }}
          out[o] = acc;
        }}
      }}
    }}"""
    return f"""

/* Row-vector pooling: a thread takes {v_out} consecutive outputs of one output row and reads each window
   row they span as {loads} whole float4s from the aligned group before their first column (their
   columns overlap: {loads * 4} floats a window row where {v_out} threads per output read {v_out * kw}
   floats one at a time), the index arithmetic done once for the four. Rows of a multiple of 4
   columns from a 16-byte aligned input only: a group then lies wholly inside the row or wholly in its
   padding (the pool's neutral value). {t.geometry} */
template <typename I>
__global__ void __launch_bounds__(256) {e}_vpool(const {e}_p p, I total) {{
  const int ID = (int)p.in[0], IH = (int)p.in[1], IW = (int)p.in[2];
  const I OD = (I)p.out[0], OH = (I)p.out[1];
  const int OW = (int)p.out[2];
  const I groups = (I)((OW + {v_out - 1}) / {v_out});
  for (I t = (I)blockIdx.x * (I)blockDim.x + (I)threadIdx.x; t < total; t += (I)gridDim.x * (I)blockDim.x) {{
    const I row = t / groups;
    const int ow0 = (int)(t - row * groups) * {v_out}, oh = (int)(row % OH), od = (int)((row / OH) % OD);
    const int64_t nc = (int64_t)(row / (OH * OD));
    const float* __restrict__ xc = p.x + nc * ID * IH * (int64_t)IW;
    const int d0 = od * {sd} - {pd}, h0 = oh * {sh} - {ph}, a0 = ow0 * {sw} - {pw} - {lead};
    float out[{v_out}];
    #pragma unroll
    for (int o = 0; o < {v_out}; ++o) out[o] = {t.neutral};
    int rows_in = 0;
    (void)rows_in;
{window}
    #pragma unroll
    for (int o = 0; o < {v_out}; ++o) {{
      const int ow = ow0 + o, w0 = ow * {sw} - {pw};
      if (ow >= OW) break;
      (void)w0;
      float acc = out[o];{count_out}{t.finish.replace(chr(10) + "    ", chr(10) + "      ")}
      p.o[(int64_t)row * OW + ow] = acc;
    }}
  }}
}}"""


def _pool_tiles(k: OpKernel, e: str, t: _PoolText, runs: str | None) -> str:
    """`_spool`: a large window's separable tiles (its columns combined over the (d, h) taps into
    shared memory, then each output over the width); `runs`: the run path's tunable, if it has one."""
    kd, kh, kw = t.window
    sd, sh, sw = t.stride
    pd, ph, pw = t.padding
    dd, dh, dw = t.dilation
    tw, span = _pool_tile(k)
    ext = (kw - 1) * dw + 1
    run_path = _pool_runs(k, t, runs, span) if runs else ""
    staging = f"\n#if {runs}\n  __shared__ float outv[{tw}];\n#endif" if runs else ""
    columns = _pool_columns(k, span)
    groups = _pool_groups(k, span)
    plural = "s" if columns > 1 else ""
    gplural = "s" if groups > 1 else ""
    group_row = f"""
            const float4 v = __ldg(reinterpret_cast<const float4*>(xc + ((int64_t)d * IH + h) * IW + w));
            {_lanes(t.combine)}"""
    column_row = f"""
            const float v = __ldg(xc + ((int64_t)d * IH + h) * IW + w);
            {t.combine}"""
    kernels = f"""

/* Separable pooling of a large window: a block takes up to {tw} outputs of one output row (n, c, d, h).
   Its threads first combine every input column of the tile's span over the window's {kd}x{kh} (d, h)
   taps (coalesced 128-byte row reads, {kd * kh} loads in flight a thread) into shared memory, then each
   output combines its {kw} column values there. A thread per output issued {kd * kh * kw} loads whose
   lanes sat {4 * sw} bytes apart. Rows of a multiple of 4 columns from a 16-byte aligned input are read
   a float4 at a time: the span's aligned groups of four columns (a quarter of the load instructions;
   a group lies wholly inside the row or wholly in its padding), shared memory holding the columns from
   the group before the span's first, `sh` columns ahead of it. {t.geometry} */
__global__ void __launch_bounds__(256) {e}_spool(const {e}_p p, int64_t rows, int64_t tiles) {{
  __shared__ __align__(16) float colv[{span + 8}];{staging}
  /* the tile's place (row, first output, h, d, n*c), worked out by one thread: 64-bit divisions are
     emulated (tens of instructions each), and done by every thread they cost more than the tile's loads */
  __shared__ int64_t geo[5];
  const int ID = (int)p.in[0], IH = (int)p.in[1], IW = (int)p.in[2];
  const int OD = (int)p.out[0], OH = (int)p.out[1], OW = (int)p.out[2];
  const bool vec = (IW & 3) == 0 && (reinterpret_cast<uintptr_t>(p.x) & 15) == 0;
  for (int64_t blk = blockIdx.x; blk < rows * tiles; blk += gridDim.x) {{
    if (threadIdx.x == 0) {{
      const int64_t r = blk / tiles;
      geo[0] = r;
      geo[1] = (blk - r * tiles) * {tw};
      geo[2] = r % OH;
      geo[3] = (r / OH) % OD;
      geo[4] = r / ((int64_t)OH * OD);
    }}
    __syncthreads();
    const int64_t row = geo[0];
    const int ow0 = (int)geo[1], oh = (int)geo[2], od = (int)geo[3];
    const int64_t nc = geo[4];
    const float* __restrict__ xc = p.x + nc * ID * IH * (int64_t)IW;
    const int d0 = od * {sd} - {pd}, h0 = oh * {sh} - {ph}, wb = ow0 * {sw} - {pw};
    const int n = OW - ow0 < {tw} ? OW - ow0 : {tw};
    const int span = (n - 1) * {sw} + {ext};
    int sh = 0;
    if (vec) {{
      /* {groups} group{gplural} of four columns a thread a pass, every load issued before the first lands */
      sh = wb & 3;
      const int a0 = wb - sh, ng = (sh + span + 3) >> 2;
      for (int g0 = threadIdx.x; g0 < ng; g0 += {groups} * (int)blockDim.x) {{
        float4 cv[{groups}];
        #pragma unroll
        for (int u = 0; u < {groups}; ++u) {{
          const int g = g0 + u * (int)blockDim.x, w = a0 + 4 * g;
          float4 acc = make_float4({t.neutral}, {t.neutral}, {t.neutral}, {t.neutral});
          if (g < ng && w >= 0 && w < IW) {{
{_window_rows(k, group_row, "            ")}
          }}
          cv[u] = acc;
        }}
        #pragma unroll
        for (int u = 0; u < {groups}; ++u) {{
          const int g = g0 + u * (int)blockDim.x;
          if (g < ng) *reinterpret_cast<float4*>(colv + 4 * g) = cv[u];
        }}
      }}
    }} else
    /* {columns} column{plural} a thread a pass, every load issued before the first lands in shared memory (a
       column at a time, each store waited for its load: one load in flight a thread) */
    for (int j0 = threadIdx.x; j0 < span; j0 += {columns} * (int)blockDim.x) {{
      float cv[{columns}];
      #pragma unroll
      for (int u = 0; u < {columns}; ++u) {{
        const int j = j0 + u * (int)blockDim.x, w = wb + j;
        float acc = {t.neutral};
        if (j < span && w >= 0 && w < IW) {{
{_window_rows(k, column_row, "          ")}
        }}
        cv[u] = acc;
      }}
      #pragma unroll
      for (int u = 0; u < {columns}; ++u) {{
        const int j = j0 + u * (int)blockDim.x;
        if (j < span) colv[j] = cv[u];
      }}
    }}
    __syncthreads();{run_path}
    for (int q = threadIdx.x; q < n; q += blockDim.x) {{
      const int ow = ow0 + q, w0 = ow * {sw} - {pw};
      float acc = {t.neutral};
      int cnt = 0;
      (void)cnt;
      #pragma unroll
      for (int c = 0; c < {kw}; ++c) {{
        const int w = w0 + c * {dw};
        if (w < 0 || w >= IW) continue;
        const float v = colv[sh + q * {sw} + c * {dw}];
        {t.combine}{t.count}
      }}"""
    if _counts_valid_taps(k):
        # the window's valid taps: valid (d, h) pairs times valid columns
        kernels += f"""
      int rows_in = 0;
      #pragma unroll
      for (int a = 0; a < {kd}; ++a) {{
        const int d = d0 + a * {dd};
        #pragma unroll
        for (int b = 0; b < {kh}; ++b) {{
          const int h = h0 + b * {dh};
          rows_in += (d >= 0 && d < ID && h >= 0 && h < IH) ? 1 : 0;
        }}
      }}
      cnt *= rows_in;"""
    kernels += f"""{t.finish.replace(chr(10) + "    ", chr(10) + "      ")}
      p.o[row * OW + ow] = acc;
    }}
    __syncthreads();
  }}
}}"""
    return kernels


def _pool_launch(k: OpKernel, e: str, tiled: str | None, separable: bool, vectorised: bool) -> str:
    """The entry's launches: the tiles (where the tunable keeps them), else the row-vector kernel
    (rows of a multiple of 4 columns from a 16-byte aligned input), else a thread per output."""
    tw = _pool_tile(k)[0] if separable else 0
    launch = """  (void)cols;
  if (items <= 0 || p.out[2] <= 0) return KF_OK;
  cudaStream_t st = (cudaStream_t)stream;
  const int64_t total = items * p.out[2];"""
    if separable:
        gate = f"{tiled} && " if tiled else ""
        launch += f"""
  if ({gate}p.in[2] < ((int64_t)1 << 30) && p.out[0] * p.out[1] * p.out[2] < ((int64_t)1 << 31)) {{
    const int64_t tiles = (p.out[2] + {tw - 1}) / {tw}, nt = items * tiles;
    {e}_spool<<<(unsigned)(nt < 1048576 ? nt : 1048576), 256, 0, st>>>(p, items, tiles);
    {_CHECK.removesuffix(chr(10) + "}").strip()}
  }}"""
    if vectorised:
        launch += f"""
  if ((p.in[2] & 3) == 0 && (reinterpret_cast<uintptr_t>(p.x) & 15) == 0) {{
    const int64_t vtotal = items * ((p.out[2] + {VPOOL_OUTPUTS - 1}) / {VPOOL_OUTPUTS});
    const int64_t vb = (vtotal + 255) / 256;
    const unsigned vgrid = (unsigned)(vb < 1048576 ? vb : 1048576);
    if (vtotal + (int64_t)vgrid * 256 < ((int64_t)1 << 31))
      {e}_vpool<int><<<vgrid, 256, 0, st>>>(p, (int)vtotal);
    else
      {e}_vpool<int64_t><<<vgrid, 256, 0, st>>>(p, vtotal);
    {_CHECK.removesuffix(chr(10) + "}").strip()}
  }}"""
    launch += f"""
  const int64_t nb = (total + 255) / 256;
  const unsigned grid = (unsigned)(nb < 1048576 ? nb : 1048576);
  /* 32-bit indices when the last grid-stride step cannot pass 2^31 */
  if (total + (int64_t)grid * 256 < ((int64_t)1 << 31)) {e}_pool<int><<<grid, 256, 0, st>>>(p, (int)total);
  else {e}_pool<int64_t><<<grid, 256, 0, st>>>(p, total);
{_CHECK}"""
    return launch


def _per_output_head(e: str, name: str) -> str:
    """A thread-per-output conv kernel's opening: its grid-stride loop over the outputs and each
    output's (ow, oh, od) position, `r` left at (image, output channel)."""
    return f"""__global__ void __launch_bounds__(256) {e}_{name}(const {e}_p p, int64_t total) {{
  const int ID = (int)p.in[0], IH = (int)p.in[1], IW = (int)p.in[2];
  const int OD = (int)p.out[0], OH = (int)p.out[1], OW = (int)p.out[2];
  const int64_t cig = p.C / p.G, cog = p.CO / p.G;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {{
    const int ow = (int)(i % OW);
    int64_t r = i / OW;
    const int oh = (int)(r % OH);
    r /= OH;
    const int od = (int)(r % OD);
    r /= OD;"""


def _per_output_launch(e: str, name: str, kernel: tuple[int, int, int]) -> str:
    """The entry's launch of a thread-per-output conv kernel, its filter size checked against the baked."""
    kd, kh, kw = kernel
    return f"""  (void)cols;
  if (items <= 0 || p.out[2] <= 0) return KF_OK;
  if (p.k[0] != {kd} || p.k[1] != {kh} || p.k[2] != {kw}) return KF_ERR_UNSUPPORTED;
  cudaStream_t st = (cudaStream_t)stream;
  const int64_t total = items * p.out[2], nb = (total + 255) / 256;
  {e}_{name}<<<(unsigned)(nb < 1048576 ? nb : 1048576), 256, 0, st>>>(p, total);
{_CHECK}"""


def _conv(k: OpKernel, e: str) -> tuple[str, str]:
    p = k.params
    kd, kh, kw = p["kernel"]
    sd, sh, sw = p["stride"]
    pd, ph, pw = p["padding"]
    dd, dh, dw = p["dilation"]
    # large filters: unrolling every tap makes nvcc slow for nothing
    unroll = "#pragma unroll" if kd * kh * kw <= 64 else "#pragma unroll 1"
    kernels = f"""/* Direct convolution: one thread per output (neighbours on neighbouring output columns, so
   input reads coalesce and the filter tap is one broadcast), the sum in a register. Filter
   {kd}x{kh}x{kw}, stride {sd}x{sh}x{sw}, padding {pd}x{ph}x{pw}, dilation {dd}x{dh}x{dw}: baked. */
{_per_output_head(e, "direct")}
    const int64_t co = r % p.CO, n = r / p.CO, g = co / cog;
    const int d0 = od * {sd} - {pd}, h0 = oh * {sh} - {ph}, w0 = ow * {sw} - {pw};
    float acc = p.b ? __ldg(p.b + co) : 0.0f;
    for (int64_t ci = 0; ci < cig; ++ci) {{
      const float* __restrict__ xc = p.x + (n * p.C + g * cig + ci) * (int64_t)ID * IH * IW;
      const float* __restrict__ wc = p.w + (co * cig + ci) * {kd * kh * kw};
      {unroll}
      for (int a = 0; a < {kd}; ++a) {{
        const int d = d0 + a * {dd};
        if (d < 0 || d >= ID) continue;
        {unroll}
        for (int b = 0; b < {kh}; ++b) {{
          const int h = h0 + b * {dh};
          if (h < 0 || h >= IH) continue;
          const float* __restrict__ xr = xc + ((int64_t)d * IH + h) * IW;
          {unroll}
          for (int c = 0; c < {kw}; ++c) {{
            const int w = w0 + c * {dw};
            if (w >= 0 && w < IW) acc += __ldg(wc + (a * {kh} + b) * {kw} + c) * __ldg(xr + w);
          }}
        }}
      }}
    }}
    p.o[i] = acc;
  }}
}}"""
    launch = _per_output_launch(e, "direct", (kd, kh, kw))
    return kernels, launch


def _conv_transpose(k: OpKernel, e: str) -> tuple[str, str]:
    p = k.params
    kd, kh, kw = p["kernel"]
    sd, sh, sw = p["stride"]
    pd, ph, pw = p["padding"]
    dd, dh, dw = p["dilation"]
    unroll = "#pragma unroll" if kd * kh * kw <= 64 else "#pragma unroll 1"
    kernels = f"""/* Transposed convolution as a gather: one thread per output, the taps whose input position
   divides by the stride, the sum in a register. Filter {kd}x{kh}x{kw}, stride {sd}x{sh}x{sw},
   padding {pd}x{ph}x{pw}, dilation {dd}x{dh}x{dw}: baked. */
{_per_output_head(e, "gather")}
    const int64_t co = r % p.CO, n = r / p.CO, g = co / cog, cj = co % cog;
    float acc = p.b ? __ldg(p.b + co) : 0.0f;
    for (int64_t ci = 0; ci < cig; ++ci) {{
      const int64_t c = g * cig + ci;
      const float* __restrict__ xc = p.x + (n * p.C + c) * (int64_t)ID * IH * IW;
      const float* __restrict__ wc = p.w + (c * cog + cj) * {kd * kh * kw};
      {unroll}
      for (int a = 0; a < {kd}; ++a) {{
        const int td = od + {pd} - a * {dd};
        if (td < 0 || td % {sd} != 0 || td / {sd} >= ID) continue;
        {unroll}
        for (int b = 0; b < {kh}; ++b) {{
          const int th = oh + {ph} - b * {dh};
          if (th < 0 || th % {sh} != 0 || th / {sh} >= IH) continue;
          const float* __restrict__ xr = xc + ((int64_t)(td / {sd}) * IH + th / {sh}) * IW;
          {unroll}
          for (int q = 0; q < {kw}; ++q) {{
            const int tw = ow + {pw} - q * {dw};
            if (tw < 0 || tw % {sw} != 0 || tw / {sw} >= IW) continue;
            acc += __ldg(wc + (a * {kh} + b) * {kw} + q) * __ldg(xr + tw / {sw});
          }}
        }}
      }}
    }}
    p.o[i] = acc;
  }}
}}"""
    launch = _per_output_launch(e, "gather", (kd, kh, kw))
    return kernels, launch


def _argreduce(k: OpKernel, e: str) -> tuple[str, str]:
    better = "v > best" if k.params["max"] else "v < best"
    kernels = f"""/* (value, index) kept by the first best, NaN winning as in torch. */
__device__ __forceinline__ void {e}_take(float v, int64_t l, float& best, int64_t& at) {{
  if (best != best) return;
  if ({better} || v != v) {{ best = v; at = l; }}
}}

/* The same, from the state "nothing seen yet" (at == L). */
__device__ __forceinline__ void {e}_first(float v, int64_t l, float& best, int64_t& at, int64_t L) {{
  if (at >= L) {{ best = v; at = l; return; }}
  {e}_take(v, l, best, at);
}}

/* Along a strided dim with narrow rows (inner < 32): one thread per column, 8 loads in flight. */
__global__ void __launch_bounds__(256) {e}_cols(const {e}_p p) {{
  const int64_t total = p.outer * p.inner, step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t t = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; t < total; t += step) {{
    const int64_t i = t % p.inner;
    const float* __restrict__ x = p.x + (t / p.inner) * p.L * p.inner + i;
    float best = x[0];
    int64_t at = 0, l = 1;
    for (; l + 8 <= p.L; l += 8) {{
      float v[8];
      #pragma unroll
      for (int u = 0; u < 8; ++u) v[u] = __ldg(x + (l + u) * p.inner);
      #pragma unroll
      for (int u = 0; u < 8; ++u) {e}_take(v[u], l + u, best, at);
    }}
    for (; l < p.L; ++l) {e}_take(__ldg(x + l * p.inner), l, best, at);
    p.o[t] = (float)at;
  }}
}}

/* Along a strided dim with rows of 32 columns or more: a block takes 32 adjacent columns (one a lane,
   128-byte row segments) and splits the reduced dim into 8 contiguous chunks, one a warp, 8 loads in
   flight each: 8 times the threads of one thread per column, which left most of the H200 idle when
   the columns were few. The chunks' (value, index) pairs meet in shared memory in chunk order, a
   later chunk winning only when strictly better (or NaN), so the first best wins as in torch. */
__global__ void __launch_bounds__(256) {e}_tcols(const {e}_p p) {{
  __shared__ float bv[8][32];
  __shared__ int64_t bi[8][32];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int64_t tiles = (p.inner + 31) / 32, chunk = (p.L + 7) / 8;
  const int64_t lo = ty * chunk, hi = lo + chunk < p.L ? lo + chunk : p.L;
  for (int64_t b = blockIdx.x; b < p.outer * tiles; b += gridDim.x) {{
    const int64_t o = b / tiles, i = (b % tiles) * 32 + tx;
    float best = NAN;
    int64_t at = p.L;  /* none: an empty chunk or a column past the end */
    if (i < p.inner && lo < hi) {{
      const float* __restrict__ x = p.x + o * p.L * p.inner + i;
      best = __ldg(x + lo * p.inner);
      at = lo;
      int64_t l = lo + 1;
      for (; l + 8 <= hi; l += 8) {{
        float v[8];
        #pragma unroll
        for (int u = 0; u < 8; ++u) v[u] = __ldg(x + (l + u) * p.inner);
        #pragma unroll
        for (int u = 0; u < 8; ++u) {e}_take(v[u], l + u, best, at);
      }}
      for (; l < hi; ++l) {e}_take(__ldg(x + l * p.inner), l, best, at);
    }}
    bv[ty][tx] = best;
    bi[ty][tx] = at;
    __syncthreads();
    if (ty == 0 && i < p.inner) {{
      /* chunk 0 is never empty (L >= 1) */
      #pragma unroll
      for (int y = 1; y < 8; ++y)
        if (bi[y][tx] < p.L) {e}_take(bv[y][tx], bi[y][tx], best, at);
      p.o[o * p.inner + i] = (float)at;
    }}
    __syncthreads();
  }}
}}

/* Along the last dim: one warp per row, lanes stride the row with 4 loads in flight (float4 loads
   when the rows allow), then a shuffle reduction that keeps the lower index among equals (and NaN
   first). Each lane meets its elements in index order, so its own first best is kept. */
template <bool VEC>
__global__ void __launch_bounds__(256) {e}_wrows(const {e}_p p) {{
  const int lane = threadIdx.x & 31;
  const int64_t warps = blockDim.x >> 5;
  for (int64_t r = (int64_t)blockIdx.x * warps + (threadIdx.x >> 5); r < p.outer;
       r += (int64_t)gridDim.x * warps) {{
    const float* __restrict__ x = p.x + r * p.L;
    float best = NAN;
    int64_t at = p.L;  /* none yet */
    int64_t l = 0;
    if (VEC) {{
      const float4* __restrict__ x4 = reinterpret_cast<const float4*>(x);
      const int64_t n4 = p.L >> 2;
      int64_t q = lane;
      for (; q + 96 < n4; q += 128) {{
        float4 v[4];
        #pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = __ldg(x4 + q + 32 * u);
        #pragma unroll
        for (int u = 0; u < 4; ++u) {{
          const int64_t j = 4 * (q + 32 * u);
          {e}_first(v[u].x, j, best, at, p.L);
          {e}_first(v[u].y, j + 1, best, at, p.L);
          {e}_first(v[u].z, j + 2, best, at, p.L);
          {e}_first(v[u].w, j + 3, best, at, p.L);
        }}
      }}
      for (; q < n4; q += 32) {{
        const float4 v = __ldg(x4 + q);
        {e}_first(v.x, 4 * q, best, at, p.L);
        {e}_first(v.y, 4 * q + 1, best, at, p.L);
        {e}_first(v.z, 4 * q + 2, best, at, p.L);
        {e}_first(v.w, 4 * q + 3, best, at, p.L);
      }}
      l = 4 * n4;
    }}
    l += lane;
    for (; l + 96 < p.L; l += 128) {{
      float v[4];
      #pragma unroll
      for (int u = 0; u < 4; ++u) v[u] = __ldg(x + l + 32 * u);
      #pragma unroll
      for (int u = 0; u < 4; ++u) {e}_first(v[u], l + 32 * u, best, at, p.L);
    }}
    for (; l < p.L; l += 32) {e}_first(__ldg(x + l), l, best, at, p.L);
    #pragma unroll
    for (int o = 16; o > 0; o >>= 1) {{
      const float v = __shfl_xor_sync(0xffffffffu, best, o);
      const int64_t a = __shfl_xor_sync(0xffffffffu, at, o);
      if (a >= p.L) continue;
      const bool vnan = v != v, bnan = best != best;
      const bool take = at >= p.L || (vnan && (!bnan || a < at)) ||
                        (!vnan && !bnan && ({better} || (v == best && a < at)));
      if (take) {{ best = v; at = a; }}
    }}
    if (lane == 0) p.o[r] = (float)at;
  }}
}}"""
    launch = f"""  (void)cols;
  if (items <= 0 || p.L <= 0) return p.L <= 0 && items > 0 ? KF_ERR_BAD_ARGUMENTS : KF_OK;
  cudaStream_t st = (cudaStream_t)stream;
  if (p.inner == 1) {{
    const int64_t nb = (p.outer + 7) / 8;
    const unsigned grid = (unsigned)(nb < 1048576 ? nb : 1048576);
    if (p.L % 4 == 0 && ((uintptr_t)p.x) % 16 == 0) {e}_wrows<true><<<grid, 256, 0, st>>>(p);
    else {e}_wrows<false><<<grid, 256, 0, st>>>(p);
  }} else if (p.inner >= 32) {{
    const int64_t nb = p.outer * ((p.inner + 31) / 32);
    {e}_tcols<<<(unsigned)(nb < 1048576 ? nb : 1048576), 256, 0, st>>>(p);
  }} else {{
    const int64_t nb = (items + 255) / 256;
    {e}_cols<<<(unsigned)(nb < 1048576 ? nb : 1048576), 256, 0, st>>>(p);
  }}
{_CHECK}"""
    return kernels, launch


def cuda_kernels(k: OpKernel, e: str) -> tuple[str, str] | None:
    """(kernels, launch) of a family with its own CUDA kernels, or None for the generic item kernel."""
    if k.family == "scan":
        return _scan(k, e)
    if k.family == "argreduce":
        return _argreduce(k, e)
    if k.family == "pool" and pool_specialised(k):
        return _pool(k, e)
    if depthwise_specialised(k):
        return depthwise_kernels(k, e)
    if k.family == "conv" and "kernel" in k.params:
        return _conv(k, e)
    if k.family == "conv_transpose" and "kernel" in k.params:
        return _conv_transpose(k, e)
    return None
