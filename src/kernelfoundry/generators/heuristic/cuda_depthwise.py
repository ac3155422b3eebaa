"""CUDA kernels of the depthwise convolution op kernel (one input channel per group, 1-d or 2-d).

An output tile of one (image, channel) plane per block, its input tile in shared memory (zero padding
included), the filter in registers:

- `_dw`, any stride and dilation: 4 output rows a thread (consecutive rows reading each shared tile row
  once at a row stride of 1), one column;
- `_dww`, strides of 1 and no column dilation (level1/83-85's convs): a 4 x 4 output patch a thread,
  each tile row it needs read from shared memory as float4s once (4 + kw - 1 columns, rounded up to
  float4s), the tile filled a float4 a load and the outputs stored as float4s (float2s) where the rows
  allow, a 128-column tile (less halo a block). On the H100 it ran 84 (3x3) 1.6x, 85 (3x7) 1.9x and 83
  (3x1) 1.4x faster than `_dw` (95%, 81% and 85% of the bandwidth floor); halving `_dw`'s shared-memory
  reads alone had changed nothing, so the fill's and the stores' instructions, not those reads, bounded
  it. A tunable (`KF_DW_COLS_<ENTRY>`: 4 `_dww`, 1 `_dw`) chooses where both apply.

Filter size, stride, padding and dilation are baked. Pure string building; never compiles.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelfoundry.generators.heuristic.opkernels import OpKernel, declared_tunable

# Shared memory a depthwise tile may take (bytes); above it the generic convolution kernel is used.
DEPTHWISE_TILE_BYTES = 40 * 1024
# Loads of a depthwise input tile a thread keeps in flight (registers) before storing them to shared memory
DEPTHWISE_LOADS_IN_FLIGHT = 16
# `_dww`: output columns (a float4) and rows a thread, threads a block (32 x 8)
WIDE_COLS, WIDE_ROWS, WIDE_BX, WIDE_BY = 4, 4, 32, 8

_CHECK = "  return cudaGetLastError() == cudaSuccess ? KF_OK : KF_ERR_LAUNCH;\n}"


def _depthwise_tile(k: OpKernel) -> tuple[int, int, int, int, int]:
    """(threads x, threads y, output rows a thread, input tile rows, input tile cols) of `_dw`."""
    _, kh, kw = k.params["kernel"]
    _, sh, sw = k.params["stride"]
    _, dh, dw = k.params["dilation"]
    bx, by, rows = (256, 1, 1) if k.params["dims"] == 1 else (32, 8, 4)
    th, tw = by * rows, bx
    return bx, by, rows, (th - 1) * sh + (kh - 1) * dh + 1, (tw - 1) * sw + (kw - 1) * dw + 1


@dataclass(frozen=True)
class WideTile:
    """`_dww`'s shared tile: rows, columns (a multiple of 4: float4 rows) and the float4s a thread reads
    from each tile row."""

    rows: int
    cols: int
    quads: int


def wide_tile(k: OpKernel) -> WideTile | None:
    """`_dww`'s tile for a 2-d depthwise conv of strides 1 and no column dilation whose tile fits, else
    None."""
    p = k.params
    if p["dims"] != 2:
        return None
    _, kh, kw = p["kernel"]
    _, sh, sw = p["stride"]
    _, dh, dw = p["dilation"]
    if (sh, sw, dw) != (1, 1, 1):
        return None
    quads = -(-(WIDE_COLS + kw - 1) // 4)
    needed = max(WIDE_BX * WIDE_COLS + kw - 1, (WIDE_BX - 1) * WIDE_COLS + 4 * quads)
    tile = WideTile(WIDE_BY * WIDE_ROWS + (kh - 1) * dh, -(-needed // 4) * 4, quads)
    return tile if tile.rows * tile.cols * 4 <= DEPTHWISE_TILE_BYTES else None


def depthwise_specialised(k: OpKernel) -> bool:
    """A 1-d or 2-d convolution with one input channel per group whose input tile fits shared memory."""
    p = k.params
    if k.family != "conv" or p["dims"] > 2 or "kernel" not in p or p.get("in_per_group") != 1:
        return False
    *_, in_rows, in_cols = _depthwise_tile(k)
    return in_rows * in_cols * 4 <= DEPTHWISE_TILE_BYTES


def _plane_head(k: OpKernel, e: str, name: str, shared: str, th: int, tw: int) -> str:
    """A depthwise kernel's opening up to its loop over planes: the tile origin, each plane's input,
    filter in registers and bias."""
    p = k.params
    _, sh, sw = p["stride"]
    _, ph, pw = p["padding"]
    return f"""__global__ void __launch_bounds__(256) {e}_{name}(const {e}_p p) {{
  {shared}
  const int IH = (int)p.in[1], IW = (int)p.in[2], OH = (int)p.out[1], OW = (int)p.out[2];
  const int64_t mult = p.CO / p.C, planes = p.N * p.CO;
  const int oh0 = blockIdx.y * {th}, ow0 = blockIdx.x * {tw};
  const int ih0 = oh0 * {sh} - {ph}, iw0 = ow0 * {sw} - {pw};
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;"""


def _plane_open() -> str:
    return """  for (int64_t z = blockIdx.z; z < planes; z += gridDim.z) {
    const int64_t n = z / p.CO, co = z % p.CO, c = co / mult;
    const float* __restrict__ xc = p.x + (n * p.C + c) * (int64_t)IH * IW;"""


def _filter(kh: int, kw: int) -> str:
    return f"""    float wr[{kh * kw}];
    #pragma unroll
    for (int i = 0; i < {kh * kw}; ++i) wr[i] = __ldg(p.w + co * {kh * kw} + i);
    const float b0 = p.b ? __ldg(p.b + co) : 0.0f;"""


def _scalar_fill(rows: int, cols: int, threads: int, indent: str) -> str:
    """The tile filled a float at a time: each thread's share of its loads (up to
    DEPTHWISE_LOADS_IN_FLIGHT) issued before it stores any (a store waiting for each load kept one load
    in flight a thread)."""
    total = rows * cols
    unroll = min(DEPTHWISE_LOADS_IN_FLIGHT, -(-total // threads))
    return f"""{indent}for (int t0 = tid; t0 < {total}; t0 += {unroll * threads}) {{
{indent}  float lv[{unroll}];
{indent}  #pragma unroll
{indent}  for (int u = 0; u < {unroll}; ++u) {{
{indent}    const int t = t0 + u * {threads}, r = t / {cols}, q = t % {cols}, ih = ih0 + r, iw = iw0 + q;
{indent}    lv[u] = (t < {total} && ih >= 0 && ih < IH && iw >= 0 && iw < IW)
{indent}                ? __ldg(xc + (int64_t)ih * IW + iw) : 0.0f;
{indent}  }}
{indent}  #pragma unroll
{indent}  for (int u = 0; u < {unroll}; ++u) {{
{indent}    const int t = t0 + u * {threads};
{indent}    if (t < {total}) tile[t / {cols}][t % {cols}] = lv[u];
{indent}  }}
{indent}}}"""


def _quad_fill(rows: int, cols: int, threads: int, indent: str) -> str:
    """The tile filled a float4 at a time (input rows of a multiple of 4 columns, 16-byte aligned, the
    tile's first column on a float4 boundary: a float4 is wholly inside a row or wholly outside)."""
    quads = rows * cols // 4
    unroll = min(DEPTHWISE_LOADS_IN_FLIGHT, -(-quads // threads))
    per_row = cols // 4
    return f"""{indent}for (int t0 = tid; t0 < {quads}; t0 += {unroll * threads}) {{
{indent}  float4 lv[{unroll}];
{indent}  #pragma unroll
{indent}  for (int u = 0; u < {unroll}; ++u) {{
{indent}    const int t = t0 + u * {threads}, ih = ih0 + t / {per_row}, iw = iw0 + 4 * (t % {per_row});
{indent}    lv[u] = (t < {quads} && ih >= 0 && ih < IH && iw >= 0 && iw < IW)
{indent}                ? __ldg(reinterpret_cast<const float4*>(xc + (int64_t)ih * IW + iw))
{indent}                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
{indent}  }}
{indent}  #pragma unroll
{indent}  for (int u = 0; u < {unroll}; ++u) {{
{indent}    const int t = t0 + u * {threads};
{indent}    if (t < {quads}) *reinterpret_cast<float4*>(&tile[t / {per_row}][4 * (t % {per_row})]) = lv[u];
{indent}  }}
{indent}}}"""


def _depthwise_outputs(rows: int, by: int, kh: int, kw: int, sh: int, sw: int, dh: int, dw: int) -> str:
    """A `_dw` thread's `rows` outputs of column `ow` from the tile. At a row stride of 1 they are
    consecutive rows, and each tile row they share is read from shared memory once into registers
    (rows + (kh - 1) * dh rows of kw values, where rows * kh rows were read: the shared-memory reads, not
    the device memory, bounded a 3x7 filter); the products are summed in the same order, so the values
    are the same. Otherwise rows `by` apart, each output reading its window."""
    if sh != 1:
        return f"""    #pragma unroll
    for (int r = 0; r < {rows}; ++r) {{
      const int ty = threadIdx.y + {by} * r, oh = oh0 + ty;
      float acc = b0;
      #pragma unroll
      for (int a = 0; a < {kh}; ++a) {{
        #pragma unroll
        for (int b = 0; b < {kw}; ++b)
          acc += wr[a * {kw} + b] * tile[ty * {sh} + a * {dh}][threadIdx.x * {sw} + b * {dw}];
      }}
      if (oh < OH && ow < OW) oc[(int64_t)oh * OW + ow] = acc;
    }}"""
    return f"""    float acc[{rows}];
    #pragma unroll
    for (int r = 0; r < {rows}; ++r) acc[r] = b0;
    #pragma unroll
    for (int i = 0; i < {rows + (kh - 1) * dh}; ++i) {{
      float v[{kw}];
      #pragma unroll
      for (int b = 0; b < {kw}; ++b) v[b] = tile[threadIdx.y * {rows} + i][threadIdx.x * {sw} + b * {dw}];
      #pragma unroll
      for (int r = 0; r < {rows}; ++r) {{
        const int a = i - r;  /* the filter row that reads tile row i for output r, where one does */
        if (a >= 0 && a % {dh} == 0 && a / {dh} < {kh}) {{
          #pragma unroll
          for (int b = 0; b < {kw}; ++b) acc[r] += wr[a / {dh} * {kw} + b] * v[b];
        }}
      }}
    }}
    #pragma unroll
    for (int r = 0; r < {rows}; ++r) {{
      const int oh = oh0 + threadIdx.y * {rows} + r;
      if (oh < OH && ow < OW) oc[(int64_t)oh * OW + ow] = acc[r];
    }}"""


def _column_kernel(k: OpKernel, e: str) -> str:
    """`_dw`: any stride and dilation, one output column a thread."""
    p = k.params
    _, kh, kw = p["kernel"]
    _, sh, sw = p["stride"]
    _, ph, pw = p["padding"]
    _, dh, dw = p["dilation"]
    bx, by, rows, in_rows, in_cols = _depthwise_tile(k)
    th = by * rows
    return f"""/* Depthwise convolution: a {th}x{bx} output tile of one (n, channel) per block, its
   {in_rows}x{in_cols} input tile in shared memory (zero padding included), the {kh}x{kw} filter in
   registers, {rows} output rows a thread. Filter, stride {sh}x{sw}, padding {ph}x{pw} and dilation
   {dh}x{dw} baked. */
{_plane_head(k, e, "dw", f"__shared__ float tile[{in_rows}][{in_cols}];", th, bx)}
{_plane_open()}
{_filter(kh, kw)}
    __syncthreads();
{_scalar_fill(in_rows, in_cols, bx * by, "    ")}
    __syncthreads();
    float* __restrict__ oc = p.o + z * (int64_t)OH * OW;
    const int ow = ow0 + threadIdx.x;
{_depthwise_outputs(rows, by, kh, kw, sh, sw, dh, dw)}
  }}
}}"""


def _wide_kernel(k: OpKernel, e: str, tile: WideTile) -> str:
    """`_dww`: strides 1, no column dilation, a WIDE_ROWS x WIDE_COLS output patch a thread. Each output
    sums its taps in `_dw`'s order (filter rows, then columns), so both give the same values."""
    p = k.params
    _, kh, kw = p["kernel"]
    _, ph, pw = p["padding"]
    _, dh, _ = p["dilation"]
    rows, cols, th, tw = WIDE_ROWS, WIDE_COLS, WIDE_BY * WIDE_ROWS, WIDE_BX * WIDE_COLS
    threads = WIDE_BX * WIDE_BY
    quad_ok = "true" if pw % 4 == 0 else "false"  # the tile's first column on a float4 of the row
    span = 4 * tile.quads
    unpack = "\n".join(
        f"      v[{4 * q + i}] = f{q}.{c};" for q in range(tile.quads) for i, c in enumerate("xyzw")
    )
    reads = "\n".join(
        f"      const float4 f{q} = *reinterpret_cast<const float4*>(&tile[ty0 + i][tx0 + {4 * q}]);"
        for q in range(tile.quads)
    )
    return f"""/* Depthwise convolution, strides 1: a {th}x{tw} output tile of one (n, channel) per block,
   its {tile.rows}x{tile.cols} input tile in shared memory (zero padding included; a float4 at a time
   where the input's rows allow), the {kh}x{kw} filter in registers, a {rows}x{cols} output patch a
   thread reading each tile row it needs as {tile.quads} float4s once. Padding {ph}x{pw} and row dilation
   {dh} baked. */
{_plane_head(k, e, "dww", f"__shared__ __align__(16) float tile[{tile.rows}][{tile.cols}];", th, tw)}
  const bool quads = {quad_ok} && (IW & 3) == 0 && (reinterpret_cast<uintptr_t>(p.x) & 15) == 0;
  const bool out4 = (OW & 3) == 0 && (reinterpret_cast<uintptr_t>(p.o) & 15) == 0;
  const bool out2 = (OW & 1) == 0 && (reinterpret_cast<uintptr_t>(p.o) & 7) == 0;
  const int ty0 = threadIdx.y * {rows}, tx0 = threadIdx.x * {cols};
{_plane_open()}
{_filter(kh, kw)}
    __syncthreads();
    if (quads) {{
{_quad_fill(tile.rows, tile.cols, threads, "      ")}
    }} else {{
{_scalar_fill(tile.rows, tile.cols, threads, "      ")}
    }}
    __syncthreads();
    float acc[{rows}][{cols}];
    #pragma unroll
    for (int r = 0; r < {rows}; ++r) {{
      #pragma unroll
      for (int c = 0; c < {cols}; ++c) acc[r][c] = b0;
    }}
    #pragma unroll
    for (int i = 0; i < {rows + (kh - 1) * dh}; ++i) {{
{reads}
      float v[{span}];
{unpack}
      #pragma unroll
      for (int r = 0; r < {rows}; ++r) {{
        const int a = i - r;  /* the filter row that reads tile row i for output row r, where one does */
        if (a >= 0 && a % {dh} == 0 && a / {dh} < {kh}) {{
          #pragma unroll
          for (int c = 0; c < {cols}; ++c) {{
            #pragma unroll
            for (int b = 0; b < {kw}; ++b) acc[r][c] += wr[a / {dh} * {kw} + b] * v[c + b];
          }}
        }}
      }}
    }}
    float* __restrict__ oc = p.o + z * (int64_t)OH * OW;
    const int ow = ow0 + tx0;
    #pragma unroll
    for (int r = 0; r < {rows}; ++r) {{
      const int oh = oh0 + ty0 + r;
      if (oh >= OH) break;
      float* __restrict__ orow = oc + (int64_t)oh * OW + ow;
      if (out4 && ow + 3 < OW) {{
        *reinterpret_cast<float4*>(orow) = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
      }} else if (out2 && ow + 3 < OW) {{
        *reinterpret_cast<float2*>(orow) = make_float2(acc[r][0], acc[r][1]);
        *reinterpret_cast<float2*>(orow + 2) = make_float2(acc[r][2], acc[r][3]);
      }} else {{
        #pragma unroll
        for (int c = 0; c < {cols}; ++c)
          if (ow + c < OW) orow[c] = acc[r][c];
      }}
    }}
  }}
}}"""


def _grid_launch(e: str, name: str, th: int, tw: int, block: str, indent: str) -> str:
    return f"""{indent}const dim3 grid((unsigned)((p.out[2] + {tw - 1}) / {tw}),
{indent}                (unsigned)((p.out[1] + {th - 1}) / {th}),
{indent}                (unsigned)(planes < 65535 ? planes : 65535));
{indent}if (grid.y > 65535) return KF_ERR_UNSUPPORTED;
{indent}{e}_{name}<<<grid, {block}, 0, st>>>(p);"""


def depthwise_kernels(k: OpKernel, e: str) -> tuple[str, str]:
    """(kernels, launch) of a depthwise conv: `_dw`, and `_dww` beside it where it applies (its tunable
    choosing, `_dww` by default)."""
    p = k.params
    _, kh, kw = p["kernel"]
    bx, by, rows, *_ = _depthwise_tile(k)
    kernels = _column_kernel(k, e)
    tile = wide_tile(k)
    if tile is None:
        column = _grid_launch(e, "dw", by * rows, bx, f"dim3({bx}, {by})", "  ")
    else:  # both apply: the tunable KF_DW_COLS_<entry> chooses, 4 `_dww`, 1 `_dw`
        tunable = f"KF_DW_COLS_{e.upper()}"
        kernels = "\n".join((declared_tunable(tunable, (4, 1), 4), kernels, _wide_kernel(k, e, tile)))
        wide = _grid_launch(
            e, "dww", WIDE_BY * WIDE_ROWS, WIDE_BX * WIDE_COLS, f"dim3({WIDE_BX}, {WIDE_BY})", "    "
        )
        one = _grid_launch(e, "dw", by * rows, bx, f"dim3({bx}, {by})", "    ")
        column = f"  if ({tunable} == 4) {{\n{wide}\n  }} else {{\n{one}\n  }}"
    launch = f"""  (void)cols;
  if (items <= 0 || p.out[2] <= 0) return KF_OK;
  if (p.G != p.C || p.CO % p.C || p.k[1] != {kh} || p.k[2] != {kw}) return KF_ERR_UNSUPPORTED;
  cudaStream_t st = (cudaStream_t)stream;
  const int64_t planes = p.N * p.CO;
{column}
{_CHECK}"""
    return kernels, launch
