"""C++ / CUDA text of the op kernels (see opkernels.py): a unit of `kf_opN` entry points.

Each family is a parameter struct and one `KF_HD` item function shared by both backends; the CPU
entry runs the items under `omp parallel for` (ISA-dispatched like every CPU entry), the CUDA entry
launches a grid-stride kernel on the given stream. Pure string building; never compiles.
"""

from __future__ import annotations

from collections.abc import Callable

from kernelfoundry.generators.heuristic.cpu import ISA_DISPATCH
from kernelfoundry.generators.heuristic.graph import UnsupportedGraph
from kernelfoundry.generators.heuristic.opkernels import OpKernel, scan_value
from kernelfoundry.generators.heuristic.opkernels_cuda import cuda_kernels
from kernelfoundry.generators.heuristic.prelude import PRELUDE

_COMMON = r"""
KF_HD int64_t kf_cdiv(int64_t a, int64_t b) { return a >= 0 ? (a + b - 1) / b : -((-a) / b); }
KF_HD int64_t kf_clampi(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }
/* Spatial dims of an N-d tensor (N = 2 + dims) as (d, h, w), 1 in front. */
static inline void kf_spatial3(const kf_tensor* t, int dims, int64_t* s) {
  for (int i = 0; i < 3; ++i) s[i] = 1;
  for (int i = 0; i < dims; ++i) s[3 - dims + i] = t->shape[t->ndim - dims + i];
}
"""


def _ints(values: tuple[int, ...]) -> str:
    return ", ".join(str(v) for v in values)


def _matmul(k: OpKernel, e: str) -> tuple[str, str, str]:
    struct = (
        f"typedef struct {{ const float* a; const float* b; float* o; int64_t M, N, K; int nb;"
        f" int64_t od[6], as[6], bs[6]; }} {e}_p;"
    )
    item = f"""KF_HD void {e}_item(const {e}_p p, int64_t row, int64_t c0, int64_t c1) {{
  int64_t m = row % p.M, b = row / p.M, ao = 0, bo = 0;
  for (int d = p.nb - 1; d >= 0; --d) {{
    const int64_t i = b % p.od[d];
    b /= p.od[d];
    ao += i * p.as[d];
    bo += i * p.bs[d];
  }}
  const float* a = p.a + ao + m * p.K;
  const float* bm = p.b + bo;
  float* o = p.o + row * p.N;
  for (int64_t n = c0; n < c1; ++n) o[n] = 0.0f;
  for (int64_t kk = 0; kk < p.K; ++kk) {{
    const float av = a[kk];
    const float* br = bm + kk * p.N;
#ifndef __CUDACC__
#pragma omp simd
#endif
    for (int64_t n = c0; n < c1; ++n) o[n] += av * br[n];
  }}
}}"""
    setup = f"""  const kf_tensor *A = &inputs[0], *B = &inputs[1];
  if (A->ndim < 2 || B->ndim < 2 || out->ndim < 2 || out->ndim - 2 > 6) return KF_ERR_UNSUPPORTED;
  {e}_p p;
  p.a = KF_DATA(const float, A); p.b = KF_DATA(const float, B); p.o = KF_DATA(float, out);
  p.M = A->shape[A->ndim - 2]; p.K = A->shape[A->ndim - 1]; p.N = B->shape[B->ndim - 1];
  if (B->shape[B->ndim - 2] != p.K || out->shape[out->ndim - 2] != p.M || out->shape[out->ndim - 1] != p.N)
    return KF_ERR_BAD_ARGUMENTS;
  p.nb = out->ndim - 2;
  int64_t sa = p.M * p.K, sb = p.K * p.N;
  for (int d = p.nb - 1; d >= 0; --d) {{
    int ia = A->ndim - 2 - (p.nb - d), ib = B->ndim - 2 - (p.nb - d);
    int64_t da = ia >= 0 ? A->shape[ia] : 1, db = ib >= 0 ? B->shape[ib] : 1;
    p.od[d] = out->shape[d];
    p.as[d] = da == 1 ? 0 : sa; p.bs[d] = db == 1 ? 0 : sb;
    sa *= da; sb *= db;
  }}
  int64_t items = kf_numel(out) / (p.N > 0 ? p.N : 1), cols = p.N;"""
    return struct, item, setup


def _linear(k: OpKernel, e: str) -> tuple[str, str, str]:
    struct = (
        f"typedef struct {{ const float* x; const float* w; const float* b; float* o; int64_t N, K; }} {e}_p;"
    )
    item = f"""KF_HD void {e}_item(const {e}_p p, int64_t row, int64_t c0, int64_t c1) {{
  const float* x = p.x + row * p.K;
  float* o = p.o + row * p.N;
  for (int64_t n = c0; n < c1; ++n) {{
    const float* w = p.w + n * p.K;
    float acc = 0.0f;
#ifndef __CUDACC__
#pragma omp simd reduction(+:acc)
#endif
    for (int64_t kk = 0; kk < p.K; ++kk) acc += x[kk] * w[kk];
    o[n] = acc + (p.b ? p.b[n] : 0.0f);
  }}
}}"""
    bias = "KF_DATA(const float, &inputs[2])" if k.params["bias"] else "0"
    setup = f"""  const kf_tensor *X = &inputs[0], *W = &inputs[1];
  if (W->ndim != 2 || X->ndim < 1) return KF_ERR_UNSUPPORTED;
  {e}_p p;
  p.x = KF_DATA(const float, X); p.w = KF_DATA(const float, W); p.b = {bias}; p.o = KF_DATA(float, out);
  p.N = W->shape[0]; p.K = W->shape[1];
  if (X->shape[X->ndim - 1] != p.K || out->shape[out->ndim - 1] != p.N) return KF_ERR_BAD_ARGUMENTS;
  int64_t items = kf_numel(X) / (p.K > 0 ? p.K : 1), cols = p.N;"""
    return struct, item, setup


_CONV_FIELDS = (
    "const float* x; const float* w; const float* b; float* o; int64_t N, C, CO, G;"
    " int64_t in[3], out[3], k[3], s[3], pd[3], dl[3];"
)


def _conv_setup(k: OpKernel, e: str) -> str:
    p = k.params
    bias = "KF_DATA(const float, &inputs[2])" if p["bias"] else "0"
    return f"""  const kf_tensor *X = &inputs[0], *W = &inputs[1];
  const int dims = {p["dims"]};
  if (X->ndim != 2 + dims || W->ndim != 2 + dims || out->ndim != 2 + dims) return KF_ERR_UNSUPPORTED;
  {e}_p p;
  p.x = KF_DATA(const float, X); p.w = KF_DATA(const float, W); p.b = {bias}; p.o = KF_DATA(float, out);
  p.N = X->shape[0]; p.C = X->shape[1]; p.CO = out->shape[1]; p.G = {p["groups"]};
  kf_spatial3(X, dims, p.in); kf_spatial3(out, dims, p.out); kf_spatial3(W, dims, p.k);
  const int64_t s[3] = {{{_ints(p["stride"])}}}, pd[3] = {{{_ints(p["padding"])}}};
  const int64_t dl[3] = {{{_ints(p["dilation"])}}};
  for (int i = 0; i < 3; ++i) {{ p.s[i] = s[i]; p.pd[i] = pd[i]; p.dl[i] = dl[i]; }}
  if (p.C % p.G || p.CO % p.G || out->shape[0] != p.N) return KF_ERR_BAD_ARGUMENTS;
  int64_t items = p.N * p.CO * p.out[0] * p.out[1], cols = p.out[2];"""


def _inside_chunks(init: str, row_setup: str, taps: str, store: str) -> str:
    """C: the host's inside pass over columns [lo, hi) of a row, 64 at a time: `acc` filled with `init`,
    then for each of the `nrows` input rows `rows[r]` (after `row_setup`) every column's taps `taps`
    added into `a` from `q` (the column's first tap), vectorised over the columns; `store` writes
    column j. Needs the constexprs `s` (stride) and `pad`."""
    return f"""  for (int64_t c = lo; c < hi; c += 64) {{
    const int n = hi - c < 64 ? (int)(hi - c) : 64;  // int columns: int64 ones became gathers (g++ 12)
    float acc[64];
    for (int j = 0; j < n; ++j) acc[j] = {init};
    for (int64_t r = 0; r < nrows; ++r) {{
      const float* __restrict xr = rows[r] + c * s - pad;
{row_setup}#pragma omp simd
      for (int j = 0; j < n; ++j) {{
        const float* q = xr + j * s;
        float a = acc[j];
{taps}
        acc[j] = a;
      }}
    }}
#pragma omp simd
    for (int j = 0; j < n; ++j) {store};
  }}"""


def _tap_range(origin: str) -> str:
    """C: [k0, k1), the width taps of the window starting at column `origin` that lie inside the row
    (`in` columns; constexprs `taps`, `dl`)."""
    last = f"(in - 1 - {origin}) / dl + 1"
    return f"""    // no test a tap: the branches cost more than an edge column's sums
    const int64_t k0 = {origin} >= 0 ? 0 : (dl - 1 - {origin}) / dl;
    const int64_t k1 = in - 1 - {origin} < 0 ? 0 : ({last} < taps ? {last} : taps);"""


def _conv(k: OpKernel, e: str) -> tuple[str, str, str]:
    struct = f"typedef struct {{ {_CONV_FIELDS} }} {e}_p;"
    # the width's taps, their spacing, the stride and the padding, baked into the host's inside pass
    kw, dw, sw, pw = (k.params[f][2] for f in ("kernel", "dilation", "stride", "padding"))
    unrolled = kw <= UNROLLED_TAPS
    weights = "".join(f"      const float w{t} = wv[{t}];\n" for t in range(kw)) if unrolled else ""
    conv_taps = _taps(
        kw,
        "for (int64_t kw = 0; kw < taps; ++kw) a += wv[kw] * q[kw * dl];",
        lambda t: f"a += w{t} * q[{t * dw}];",
        " " * 8,
    )
    setup = "      const float* __restrict wv = ws[r];\n" + weights
    inside = _inside_chunks("b0", setup, conv_taps, "o[c + j] = acc[j]")
    tap_range = _tap_range("w0")
    item = f"""#ifndef __CUDACC__
// Rows of (input channel, d tap, h tap) an output row may hold in the inside pass (more: sweeps alone)
#define {e}_ROWS 256
// Outputs [lo, hi) of a row whose width taps all lie inside the input, the row's (input row, filter
// row) pairs given: 64 columns at a time, their sums in a buffer that stays in L1, each pair's width
// taps (count, spacing and stride baked: the tap loop unrolls, its weights in registers) in one
// vectorised pass of the 64, in the sweeps' order of terms
static inline void {e}_inside(const float* const* rows, const float* const* ws, int64_t nrows, float b0,
                              float* o, int64_t lo, int64_t hi) {{
  constexpr int64_t taps = {kw}, dl = {dw}, s = {sw}, pad = {pw};
{inside}
}}
// Outputs [lo, hi) at a row's edges, one at a time: the width taps inside the input, in the same order
static void {e}_edge(const {e}_p& p, const float* const* rows, const float* const* ws, int64_t nrows,
                     float b0, float* o, int64_t lo, int64_t hi) {{
  constexpr int64_t taps = {kw}, dl = {dw}, s = {sw}, pad = {pw};
  const int64_t in = p.in[2];
  for (int64_t ow = lo; ow < hi; ++ow) {{
    const int64_t w0 = ow * s - pad;
{tap_range}
    float acc = b0;
    for (int64_t r = 0; r < nrows; ++r) {{
      const float* xr = rows[r] + w0;
      const float* wr = ws[r];
      for (int64_t kw = k0; kw < k1; ++kw) acc += wr[kw] * xr[kw * dl];
    }}
    o[ow] = acc;
  }}
}}
#endif
KF_HD void {e}_item(const {e}_p p, int64_t row, int64_t c0, int64_t c1) {{
  const int64_t oh = row % p.out[1], od = (row / p.out[1]) % p.out[0];
  const int64_t co = (row / (p.out[1] * p.out[0])) % p.CO, n = row / (p.out[1] * p.out[0] * p.CO);
  const int64_t OW = p.out[2], cig = p.C / p.G, g = co / (p.CO / p.G);
  float* o = p.o + row * OW;
  const float b0 = p.b ? p.b[co] : 0.0f;
#ifndef __CUDACC__
  {{
    // the host: the row's (input row, filter row) pairs found once; the columns whose width taps all
    // lie inside the input in the inside pass, the edges one at a time
    const float* rows[{e}_ROWS];
    const float* ws[{e}_ROWS];
    int64_t nrows = 0;
    for (int64_t ci = 0; ci < cig && nrows <= {e}_ROWS; ++ci) {{
      const int64_t c = g * cig + ci;
      for (int64_t kd = 0; kd < p.k[0]; ++kd) {{
        const int64_t id = od * p.s[0] - p.pd[0] + kd * p.dl[0];
        if (id < 0 || id >= p.in[0]) continue;
        for (int64_t kh = 0; kh < p.k[1]; ++kh) {{
          const int64_t ih = oh * p.s[1] - p.pd[1] + kh * p.dl[1];
          if (ih < 0 || ih >= p.in[1]) continue;
          if (nrows < {e}_ROWS) {{
            rows[nrows] = p.x + (((n * p.C + c) * p.in[0] + id) * p.in[1] + ih) * p.in[2];
            ws[nrows] = p.w + (((co * cig + ci) * p.k[0] + kd) * p.k[1] + kh) * p.k[2];
          }}
          ++nrows;
        }}
      }}
    }}
    if (nrows <= {e}_ROWS && p.k[2] == {kw}) {{
      const int64_t last = p.in[2] - 1 - (p.k[2] - 1) * p.dl[2] + p.pd[2];  // the last tap inside
      const int64_t ilo = kf_clampi(kf_cdiv(p.pd[2], p.s[2]), c0, c1);
      const int64_t ihi = kf_clampi(last >= 0 ? last / p.s[2] + 1 : 0, ilo, c1);
      {e}_inside(rows, ws, nrows, b0, o, ilo, ihi);
      {e}_edge(p, rows, ws, nrows, b0, o, c0, ilo);
      {e}_edge(p, rows, ws, nrows, b0, o, ihi, c1);
      return;
    }}
  }}
#endif
  for (int64_t ow = c0; ow < c1; ++ow) o[ow] = b0;
  for (int64_t ci = 0; ci < cig; ++ci) {{
    const int64_t c = g * cig + ci;
    for (int64_t kd = 0; kd < p.k[0]; ++kd) {{
      const int64_t id = od * p.s[0] - p.pd[0] + kd * p.dl[0];
      if (id < 0 || id >= p.in[0]) continue;
      for (int64_t kh = 0; kh < p.k[1]; ++kh) {{
        const int64_t ih = oh * p.s[1] - p.pd[1] + kh * p.dl[1];
        if (ih < 0 || ih >= p.in[1]) continue;
        const float* xr = p.x + (((n * p.C + c) * p.in[0] + id) * p.in[1] + ih) * p.in[2];
        const float* wr = p.w + (((co * cig + ci) * p.k[0] + kd) * p.k[1] + kh) * p.k[2];
        for (int64_t kw = 0; kw < p.k[2]; ++kw) {{
          const float wv = wr[kw];
          const int64_t off = kw * p.dl[2] - p.pd[2];
          const int64_t lo = kf_clampi(kf_cdiv(-off, p.s[2]), c0, c1);
          const int64_t hi = kf_clampi(kf_cdiv(p.in[2] - off, p.s[2]), lo, c1);
          if (p.s[2] == 1) {{
#ifndef __CUDACC__
#pragma omp simd
#endif
            for (int64_t ow = lo; ow < hi; ++ow) o[ow] += wv * xr[ow + off];
          }} else {{
            for (int64_t ow = lo; ow < hi; ++ow) o[ow] += wv * xr[ow * p.s[2] + off];
          }}
        }}
      }}
    }}
  }}
}}"""
    return struct, item, _conv_setup(k, e)


def _conv_transpose(k: OpKernel, e: str) -> tuple[str, str, str]:
    struct = f"typedef struct {{ {_CONV_FIELDS} }} {e}_p;"
    item = f"""KF_HD void {e}_item(const {e}_p p, int64_t row, int64_t c0, int64_t c1) {{
  const int64_t oh = row % p.out[1], od = (row / p.out[1]) % p.out[0];
  const int64_t co = (row / (p.out[1] * p.out[0])) % p.CO, n = row / (p.out[1] * p.out[0] * p.CO);
  const int64_t OW = p.out[2], cig = p.C / p.G, cog = p.CO / p.G, g = co / cog, cj = co % cog;
  float* o = p.o + row * OW;
  const float b0 = p.b ? p.b[co] : 0.0f;
  for (int64_t ow = c0; ow < c1; ++ow) o[ow] = b0;
  for (int64_t ci = 0; ci < cig; ++ci) {{
    const int64_t c = g * cig + ci;
    for (int64_t kd = 0; kd < p.k[0]; ++kd) {{
      const int64_t td = od + p.pd[0] - kd * p.dl[0];
      if (td < 0 || td % p.s[0] || td / p.s[0] >= p.in[0]) continue;
      for (int64_t kh = 0; kh < p.k[1]; ++kh) {{
        const int64_t th = oh + p.pd[1] - kh * p.dl[1];
        if (th < 0 || th % p.s[1] || th / p.s[1] >= p.in[1]) continue;
        const float* xr = p.x + (((n * p.C + c) * p.in[0] + td / p.s[0]) * p.in[1] + th / p.s[1]) * p.in[2];
        const float* wr = p.w + (((c * cog + cj) * p.k[0] + kd) * p.k[1] + kh) * p.k[2];
        for (int64_t kw = 0; kw < p.k[2]; ++kw) {{
          const float wv = wr[kw];
          // input column iw reaches output column ow = iw * s - off; only those inside [c0, c1)
          const int64_t off = p.pd[2] - kw * p.dl[2];
          const int64_t lo = kf_clampi(kf_cdiv(c0 + off, p.s[2]), 0, p.in[2]);
          const int64_t hi = kf_clampi(kf_cdiv(c1 + off, p.s[2]), lo, p.in[2]);
          if (p.s[2] == 1) {{
#ifndef __CUDACC__
#pragma omp simd
#endif
            for (int64_t iw = lo; iw < hi; ++iw) o[iw - off] += wv * xr[iw];
          }} else {{
            for (int64_t iw = lo; iw < hi; ++iw) o[iw * p.s[2] - off] += wv * xr[iw];
          }}
        }}
      }}
    }}
  }}
}}"""
    return struct, item, _conv_setup(k, e)


# Width taps the host's inside passes spell out one statement each: g++ vectorises the columns' loop only
# when no loop is left inside it (a tap loop, even one `#pragma GCC unroll` names, became gathers); a
# wider window keeps the loop
UNROLLED_TAPS = 32


def _taps(count: int, loop: str, statement: Callable[[int], str], indent: str) -> str:
    """The inside pass's taps: `statement(kw)` for each, or `loop` (the tap loop) past UNROLLED_TAPS."""
    if count > UNROLLED_TAPS:
        return indent + loop
    return "\n".join(indent + statement(kw) for kw in range(count))


def _pool(k: OpKernel, e: str) -> tuple[str, str, str]:
    p = k.params
    struct = (
        f"typedef struct {{ const float* x; float* o; int64_t in[3], out[3], k[3], s[3], pd[3], dl[3];"
        f" int is_max, adaptive, include_pad; int64_t divisor; }} {e}_p;"
    )
    # the width's taps, their spacing, the stride and the padding, baked into the host's inside pass
    kw, dw, sw, pw = (
        (1, 1, 1, 0) if p["adaptive"] else (p[f][2] for f in ("window", "dilation", "stride", "padding"))
    )
    is_max = int(bool(p["max"]))
    load, combine = "q[{}]", "a = (v > a || v != v) ? v : a;"
    if is_max:
        step = "{{ const float v = " + load + "; " + combine + " }}"
        loop = "for (int64_t kw = 0; kw < taps; ++kw) { const float v = q[kw * dl]; " + combine + " }"
    else:
        step = "a += " + load + ";"
        loop = "for (int64_t kw = 0; kw < taps; ++kw) a += q[kw * dl];"
    pool_taps = _taps(kw, loop, lambda t: step.format(t * dw), " " * 8)
    store = "o[c + j] = acc[j]" if is_max else "o[c + j] = acc[j] / div"
    inside = _inside_chunks("-INFINITY" if is_max else "0.0f", "", pool_taps, store)
    tap_range = _tap_range("sw")
    item = f"""#ifndef __CUDACC__
// The host, a fixed window: columns [c0, c1) of output row (od, oh) by sweeps, each tap of the width
// over the columns it reaches (vectorised at unit stride), then the average's divisor.
static void {e}_sweep(const {e}_p& p, const float* x, float* o, int64_t od, int64_t oh, int64_t c0,
                      int64_t c1) {{
  const int64_t sd = od * p.s[0] - p.pd[0], sh = oh * p.s[1] - p.pd[1];
  for (int64_t ow = c0; ow < c1; ++ow) o[ow] = p.is_max ? -INFINITY : 0.0f;
  int64_t rows_seen = 0;
  for (int64_t kd = 0; kd < p.k[0]; ++kd) {{
    const int64_t d = sd + kd * p.dl[0];
    if (d < 0 || d >= p.in[0]) continue;
    for (int64_t kh = 0; kh < p.k[1]; ++kh) {{
      const int64_t h = sh + kh * p.dl[1];
      if (h < 0 || h >= p.in[1]) continue;
      ++rows_seen;
      const float* xr = x + (d * p.in[1] + h) * p.in[2];
      for (int64_t kw = 0; kw < p.k[2]; ++kw) {{
        const int64_t off = kw * p.dl[2] - p.pd[2];
        const int64_t lo = kf_clampi(kf_cdiv(-off, p.s[2]), c0, c1);
        const int64_t hi = kf_clampi(kf_cdiv(p.in[2] - off, p.s[2]), lo, c1);
        if (p.is_max && p.s[2] == 1) {{
#pragma omp simd
          for (int64_t ow = lo; ow < hi; ++ow) {{
            const float v = xr[ow + off];
            o[ow] = (v > o[ow] || v != v) ? v : o[ow];
          }}
        }} else if (p.is_max) {{
          for (int64_t ow = lo; ow < hi; ++ow) {{
            const float v = xr[ow * p.s[2] + off];
            o[ow] = (v > o[ow] || v != v) ? v : o[ow];
          }}
        }} else if (p.s[2] == 1) {{
#pragma omp simd
          for (int64_t ow = lo; ow < hi; ++ow) o[ow] += xr[ow + off];
        }} else {{
          for (int64_t ow = lo; ow < hi; ++ow) o[ow] += xr[ow * p.s[2] + off];
        }}
      }}
    }}
  }}
  if (!p.is_max) {{
    // the divisor: the override, else the window clipped to the padded input, else its valid taps
    const int64_t ed = sd + p.k[0] < p.in[0] + p.pd[0] ? sd + p.k[0] : p.in[0] + p.pd[0];
    const int64_t eh = sh + p.k[1] < p.in[1] + p.pd[1] ? sh + p.k[1] : p.in[1] + p.pd[1];
    for (int64_t ow = c0; ow < c1; ++ow) {{
      const int64_t sw = ow * p.s[2] - p.pd[2];
      int64_t div = p.divisor;
      if (!div && p.include_pad) {{
        const int64_t ew = sw + p.k[2] < p.in[2] + p.pd[2] ? sw + p.k[2] : p.in[2] + p.pd[2];
        div = (ed - sd) * (eh - sh) * (ew - sw);
      }} else if (!div) {{
        int64_t cols = 0;
        for (int64_t kw = 0; kw < p.k[2]; ++kw) {{
          const int64_t w = sw + kw * p.dl[2];
          cols += w >= 0 && w < p.in[2];
        }}
        div = rows_seen * cols;
      }}
      o[ow] = o[ow] / (float)(div > 0 ? div : 1);
    }}
  }}
}}

// Outputs [lo, hi) of a row whose width taps all lie inside the input, the window's (d, h) rows given:
// 64 columns at a time, their partial results in a buffer that stays in L1, each row's taps of the width
// (their count, spacing and the stride baked: the tap loop unrolls) in one vectorised pass of the 64
static inline void {e}_inside(const float* const* rows, int64_t nrows, float div, float* o, int64_t lo,
                              int64_t hi) {{
  constexpr int64_t taps = {kw}, dl = {dw}, s = {sw}, pad = {pw};
{inside}
}}

// Outputs [lo, hi) at a row's edges, one at a time, the window's (d, h) rows given: the width taps
// inside the input in the inside pass's order, then the average's divisor of the column (`plane`: the
// window's (d, h) extent clipped to the padded input)
static void {e}_edge(const {e}_p& p, const float* const* rows, int64_t nrows, int64_t plane, float* o,
                     int64_t lo, int64_t hi) {{
  constexpr int64_t taps = {kw}, dl = {dw}, s = {sw}, pad = {pw};
  const int64_t in = p.in[2];
  for (int64_t ow = lo; ow < hi; ++ow) {{
    const int64_t sw = ow * s - pad;
{tap_range}
    const int64_t cols = k1 > k0 ? k1 - k0 : 0;
    float acc = {is_max} ? -INFINITY : 0.0f;
    for (int64_t r = 0; r < nrows; ++r) {{
      const float* xr = rows[r] + sw;
      for (int64_t kw = k0; kw < k1; ++kw) {{
        const float v = xr[kw * dl];
        if ({is_max}) acc = (v > acc || v != v) ? v : acc;
        else acc += v;
      }}
    }}
    if (!{is_max}) {{
      int64_t div = p.divisor;
      if (!div && p.include_pad) {{
        const int64_t ew = sw + p.k[2] < p.in[2] + p.pd[2] ? sw + p.k[2] : p.in[2] + p.pd[2];
        div = plane * (ew - sw);
      }} else if (!div) {{
        div = nrows * cols;
      }}
      acc = acc / (float)(div > 0 ? div : 1);
    }}
    o[ow] = acc;
  }}
}}

// Rows of the window (d, h) a row of outputs may hold in registers' reach (more: the sweeps alone)
#define {e}_ROWS 256
#endif
KF_HD void {e}_item(const {e}_p p, int64_t row, int64_t c0, int64_t c1) {{
  const int64_t oh = row % p.out[1], od = (row / p.out[1]) % p.out[0], nc = row / (p.out[1] * p.out[0]);
  const float* x = p.x + nc * p.in[0] * p.in[1] * p.in[2];
  float* o = p.o + row * p.out[2];
#ifndef __CUDACC__
  if (!p.adaptive) {{
    // The columns whose every width tap lies inside the input: each output's window in registers,
    // its (d, h) rows found once for the row, a lane an output (vectorised: no read-modify-write
    // passes over the row, no bounds checks); the columns at the edges one at a time.
    const int64_t sd = od * p.s[0] - p.pd[0], sh = oh * p.s[1] - p.pd[1];
    const float* rows[{e}_ROWS];
    int64_t nrows = 0;
    for (int64_t kd = 0; kd < p.k[0]; ++kd) {{
      const int64_t d = sd + kd * p.dl[0];
      if (d < 0 || d >= p.in[0]) continue;
      for (int64_t kh = 0; kh < p.k[1]; ++kh) {{
        const int64_t h = sh + kh * p.dl[1];
        if (h < 0 || h >= p.in[1]) continue;
        if (nrows < {e}_ROWS) rows[nrows] = x + (d * p.in[1] + h) * p.in[2];
        ++nrows;
      }}
    }}
    const int64_t last = p.in[2] - 1 - (p.k[2] - 1) * p.dl[2] + p.pd[2];  // the last tap inside
    const int64_t ilo = kf_clampi(kf_cdiv(p.pd[2], p.s[2]), c0, c1);
    const int64_t ihi = kf_clampi(last >= 0 ? last / p.s[2] + 1 : 0, ilo, c1);
    if (nrows > {e}_ROWS) {{
      {e}_sweep(p, x, o, od, oh, c0, c1);
      return;
    }}
    const int64_t ed = sd + p.k[0] < p.in[0] + p.pd[0] ? sd + p.k[0] : p.in[0] + p.pd[0];
    const int64_t eh = sh + p.k[1] < p.in[1] + p.pd[1] ? sh + p.k[1] : p.in[1] + p.pd[1];
    // an average's divisor inside: every width tap counts
    const int64_t taps = (p.include_pad ? (ed - sd) * (eh - sh) : nrows) * p.k[2];
    const float div = (float)(p.divisor ? p.divisor : (taps > 0 ? taps : 1));
    {e}_inside(rows, nrows, div, o, ilo, ihi);
    {e}_edge(p, rows, nrows, (ed - sd) * (eh - sh), o, c0, ilo);
    {e}_edge(p, rows, nrows, (ed - sd) * (eh - sh), o, ihi, c1);
    return;
  }}
#endif
  int64_t lo[3], hi[3], step[3];
  for (int64_t ow = c0; ow < c1; ++ow) {{
    const int64_t oi[3] = {{od, oh, ow}};
    int64_t count = 1;
    for (int i = 0; i < 3; ++i) {{
      if (p.adaptive) {{
        lo[i] = (oi[i] * p.in[i]) / p.out[i];
        hi[i] = ((oi[i] + 1) * p.in[i] + p.out[i] - 1) / p.out[i];
        step[i] = 1;
      }} else {{
        const int64_t start = oi[i] * p.s[i] - p.pd[i];
        step[i] = p.dl[i];
        if (p.is_max) {{
          lo[i] = start;
          hi[i] = start + (p.k[i] - 1) * p.dl[i] + 1;
        }} else {{
          const int64_t end = start + p.k[i] < p.in[i] + p.pd[i] ? start + p.k[i] : p.in[i] + p.pd[i];
          count *= end - start;
          lo[i] = start; hi[i] = end;
        }}
      }}
    }}
    float acc = p.is_max ? -INFINITY : 0.0f;
    int64_t seen = 0;
    for (int64_t d = lo[0]; d < hi[0]; d += step[0]) {{
      if (d < 0 || d >= p.in[0]) continue;
      for (int64_t h = lo[1]; h < hi[1]; h += step[1]) {{
        if (h < 0 || h >= p.in[1]) continue;
        const float* xr = x + (d * p.in[1] + h) * p.in[2];
        for (int64_t w = lo[2]; w < hi[2]; w += step[2]) {{
          if (w < 0 || w >= p.in[2]) continue;
          const float v = xr[w];
          if (p.is_max) acc = (v > acc || v != v) ? v : acc; else acc += v;
          ++seen;
        }}
      }}
    }}
    if (!p.is_max) {{
      const int64_t div = p.divisor ? p.divisor : (p.adaptive || !p.include_pad ? seen : count);
      acc = acc / (float)(div > 0 ? div : 1);
    }}
    o[ow] = acc;
  }}
}}"""
    adaptive = p["adaptive"]
    window = (1, 1, 1) if adaptive else p["window"]
    stride = (1, 1, 1) if adaptive else p["stride"]
    padding = (0, 0, 0) if adaptive else p["padding"]
    dilation = (1, 1, 1) if adaptive else p["dilation"]
    setup = f"""  const kf_tensor* X = &inputs[0];
  const int dims = {p["dims"]};
  if (X->ndim < dims + 1 || out->ndim != X->ndim) return KF_ERR_UNSUPPORTED;
  {e}_p p;
  p.x = KF_DATA(const float, X); p.o = KF_DATA(float, out);
  kf_spatial3(X, dims, p.in); kf_spatial3(out, dims, p.out);
  const int64_t k[3] = {{{_ints(window)}}}, s[3] = {{{_ints(stride)}}};
  const int64_t pd[3] = {{{_ints(padding)}}}, dl[3] = {{{_ints(dilation)}}};
  for (int i = 0; i < 3; ++i) {{ p.k[i] = k[i]; p.s[i] = s[i]; p.pd[i] = pd[i]; p.dl[i] = dl[i]; }}
  p.is_max = {p["max"]}; p.adaptive = {adaptive}; p.include_pad = {p.get("include_pad", 1)};
  p.divisor = {p.get("divisor", 0)};
  int64_t items = kf_numel(out) / (p.out[2] > 0 ? p.out[2] : 1), cols = p.out[2];"""
    return struct, item, setup


def _lines_setup(e: str, dim: int) -> str:
    """outer x L x inner around `dim`; one item per (outer, inner) line."""
    return f"""  const kf_tensor* X = &inputs[0];
  if (X->ndim < 1) return KF_ERR_UNSUPPORTED;
  const int d = (({dim}) % X->ndim + X->ndim) % X->ndim;
  {e}_p p;
  p.x = KF_DATA(const float, X); p.o = KF_DATA(float, out);
  p.outer = 1; p.inner = 1; p.L = X->shape[d];
  for (int i = 0; i < d; ++i) p.outer *= X->shape[i];
  for (int i = d + 1; i < X->ndim; ++i) p.inner *= X->shape[i];
  int64_t items = p.outer * p.inner, cols = 1;"""


def _scan(k: OpKernel, e: str) -> tuple[str, str, str]:
    """cumsum / cumprod along `dim`; `reverse` runs from the end of the dim (flip, scan, flip),
    `exclusive` writes each position the scan of the elements before it (the identity first), `masked`
    scans x * mask with a bool mask (scans.py rewrites those idioms into one node)."""
    fields = "const float* x; const unsigned char* m; float* o; int64_t outer, L, inner;"
    struct = f"typedef struct {{ {fields} }} {e}_p;"
    op, init = ("*", "1.0f") if k.params["prod"] else ("+", "0.0f")
    at = "p.L - 1 - l" if k.params.get("reverse") else "l"
    value = scan_value(k, "p.x", "p.m", "base + q * p.inner")
    step = (
        f"p.o[base + q * p.inner] = acc;\n    acc = acc {op} {value};"
        if k.params.get("exclusive")
        else f"acc = acc {op} {value};\n    p.o[base + q * p.inner] = acc;"
    )
    item = f"""KF_HD void {e}_item(const {e}_p p, int64_t line, int64_t c0, int64_t c1) {{
  (void)c0;
  (void)c1;
  const int64_t i = line % p.inner, base = (line / p.inner) * p.L * p.inner + i;
  float acc = {init};
  for (int64_t l = 0; l < p.L; ++l) {{
    const int64_t q = {at};
    {step}
  }}
}}"""
    setup = (
        _lines_setup(e, k.params["dim"])
        + "\n  if (kf_numel(out) != kf_numel(X)) return KF_ERR_BAD_ARGUMENTS;"
        + "\n  p.m = NULL;"
    )
    if k.params.get("masked"):
        setup += (
            "\n  if (!kf_same_shape(&inputs[1], X)) return KF_ERR_BAD_ARGUMENTS;"
            "\n  p.m = KF_DATA(const unsigned char, &inputs[1]);"
        )
    return struct, item, setup


def _argreduce(k: OpKernel, e: str) -> tuple[str, str, str]:
    struct = f"typedef struct {{ const float* x; float* o; int64_t outer, L, inner; }} {e}_p;"
    better = "v > best" if k.params["max"] else "v < best"
    item = f"""KF_HD void {e}_item(const {e}_p p, int64_t line, int64_t c0, int64_t c1) {{
  (void)c0;
  (void)c1;
  const int64_t i = line % p.inner, base = (line / p.inner) * p.L * p.inner + i;
  float best = p.x[base];
  int64_t at = 0;
  for (int64_t l = 1; l < p.L; ++l) {{
    const float v = p.x[base + l * p.inner];
    if (best != best) break;
    if ({better} || v != v) {{ best = v; at = l; }}
  }}
  p.o[line] = (float)at;
}}"""
    setup = _lines_setup(e, k.params["dim"]) + "\n  if (kf_numel(out) != items) return KF_ERR_BAD_ARGUMENTS;"
    return struct, item, setup


def _attention(k: OpKernel, e: str) -> tuple[str, str, str]:
    struct = (
        f"typedef struct {{ const float* q; const float* k; const float* v; float* o;"
        f" int64_t Lq, Lk, E, Ev; float scale; }} {e}_p;"
    )
    item = f"""KF_HD void {e}_item(const {e}_p p, int64_t row, int64_t c0, int64_t c1) {{
  (void)c0;
  (void)c1;
  const int64_t bh = row / p.Lq;
  const float* q = p.q + row * p.E;
  const float* kb = p.k + bh * p.Lk * p.E;
  const float* vb = p.v + bh * p.Lk * p.Ev;
  float* o = p.o + row * p.Ev;
  float m = -INFINITY;
  for (int64_t j = 0; j < p.Lk; ++j) {{
    float s = 0.0f;
    for (int64_t t = 0; t < p.E; ++t) s += q[t] * kb[j * p.E + t];
    m = s * p.scale > m ? s * p.scale : m;
  }}
  for (int64_t t = 0; t < p.Ev; ++t) o[t] = 0.0f;
  float l = 0.0f;
  for (int64_t j = 0; j < p.Lk; ++j) {{
    float s = 0.0f;
    for (int64_t t = 0; t < p.E; ++t) s += q[t] * kb[j * p.E + t];
    const float w = expf(s * p.scale - m);
    l += w;
    const float* vr = vb + j * p.Ev;
#ifndef __CUDACC__
#pragma omp simd
#endif
    for (int64_t t = 0; t < p.Ev; ++t) o[t] += w * vr[t];
  }}
  for (int64_t t = 0; t < p.Ev; ++t) o[t] /= l;
}}"""
    scale = k.params["scale"]
    scale_c = f"{scale!r}f" if scale else "1.0f / sqrtf((float)p.E)"
    setup = f"""  const kf_tensor *Q = &inputs[0], *K = &inputs[1], *V = &inputs[2];
  if (Q->ndim < 2 || K->ndim != Q->ndim || V->ndim != Q->ndim) return KF_ERR_UNSUPPORTED;
  for (int i = 0; i < Q->ndim - 2; ++i)
    if (K->shape[i] != Q->shape[i] || V->shape[i] != Q->shape[i]) return KF_ERR_UNSUPPORTED;
  {e}_p p;
  p.q = KF_DATA(const float, Q); p.k = KF_DATA(const float, K); p.v = KF_DATA(const float, V);
  p.o = KF_DATA(float, out);
  p.Lq = Q->shape[Q->ndim - 2]; p.E = Q->shape[Q->ndim - 1]; p.Lk = K->shape[K->ndim - 2];
  p.Ev = V->shape[V->ndim - 1];
  p.scale = {scale_c};
  if (K->shape[K->ndim - 1] != p.E || V->shape[V->ndim - 2] != p.Lk) return KF_ERR_BAD_ARGUMENTS;
  int64_t items = kf_numel(Q) / (p.E > 0 ? p.E : 1), cols = 1;"""
    return struct, item, setup


_FAMILIES = {
    "matmul": _matmul,
    "linear": _linear,
    "conv": _conv,
    "conv_transpose": _conv_transpose,
    "pool": _pool,
    "scan": _scan,
    "argreduce": _argreduce,
    "attention": _attention,
}


def op_entry(kernel: OpKernel, entry: str, backend: str) -> str:
    """One family's struct, item function and `entry` for `backend` ("cpu" or "cuda")."""
    if kernel.family not in _FAMILIES:
        raise UnsupportedGraph(f"no op-kernel family `{kernel.family}` for `{kernel.node}`")
    struct, item, setup = _FAMILIES[kernel.family](kernel, entry)
    n_in = len(kernel.inputs)
    checks = (
        "  for (int32_t i = 0; i < n_inputs; ++i) if (!kf_tensor_ok(&inputs[i])) return KF_ERR_BAD_ARGUMENTS;"
    )
    if kernel.bool_inputs:
        checks = "\n".join(
            f"  if (!{'kf_mask_ok' if i in kernel.bool_inputs else 'kf_tensor_ok'}(&inputs[{i}]))"
            " return KF_ERR_BAD_ARGUMENTS;"
            for i in range(n_in)
        )
    head = f"""KF_EXPORT int {entry}(const kf_tensor* inputs, int32_t n_inputs, kf_tensor* outputs,
                 int32_t n_outputs, void* stream) {{
  if (n_inputs != {n_in} || n_outputs != 1) return KF_ERR_BAD_ARGUMENTS;
{checks}
  if (!kf_tensor_ok(&outputs[0])) return KF_ERR_BAD_ARGUMENTS;
  kf_tensor* out = &outputs[0];
{setup}"""
    if backend == "cuda" and (own := cuda_kernels(kernel, entry)) is not None:
        kernels, launch = own
        return "\n".join([struct, kernels, head, launch])
    if backend == "cuda":
        kernel_text = f"""/* One thread per output element: neighbours read neighbouring inputs. */
__global__ void {entry}_kernel(const {entry}_p p, int64_t items, int64_t cols) {{
  const int64_t total = items * cols, step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total; i += step) {{
    const int64_t c = i % cols;
    {entry}_item(p, i / cols, c, c + 1);
  }}
}}"""
        run = f"""  if (items <= 0 || cols <= 0) return KF_OK;
  cudaStream_t st = (cudaStream_t)stream;
  int64_t blocks = (items * cols + 255) / 256;
  {entry}_kernel<<<(unsigned)(blocks < 1048576 ? blocks : 1048576), 256, 0, st>>>(p, items, cols);
  return cudaGetLastError() == cudaSuccess ? KF_OK : KF_ERR_LAUNCH;
}}"""
        return "\n".join([struct, item, kernel_text, head, run])
    run = f"""  (void)stream;
  // eight chunks of items a thread, taken as threads free up: an item may be as small as a pooled row
  // of a few hundred outputs, and taking one (an atomic) then costs more than the row
  const int64_t per = items / (8 * (int64_t)omp_get_max_threads()) + 1;
  const int chunk = (int)(per < 65536 ? per : 65536);
#pragma omp parallel for schedule(dynamic, chunk)
  for (int64_t i = 0; i < items; ++i) {entry}_item(p, i, 0, cols);
  return KF_OK;
}}"""
    return "\n".join([struct, item, head.replace("KF_EXPORT int", "KF_EXPORT KF_CPU_ENTRY int"), run])


def op_entries(kernels: list[tuple[OpKernel, str]], backend: str) -> str:
    """Op-kernel entry points to append to a unit that already has the prelude (and, on the CPU, the
    ISA dispatch macro): the shared helpers, then one entry per (kernel, entry name)."""
    return "\n".join([_COMMON, *(op_entry(k, e, backend) for k, e in kernels), ""])


def op_unit(kernels: list[tuple[OpKernel, str]], backend: str, header: list[str]) -> str:
    """A whole unit of op-kernel entry points (kernel, entry name)."""
    lines = [*header, "// op kernels: " + ", ".join(f"{k.family} -> {e}" for k, e in kernels)]
    if backend == "cpu":
        lines += [
            "// @kf.tunable KF_DISPATCH in [0, 1] default 1",
            "#ifndef KF_DISPATCH",
            "#define KF_DISPATCH 1",
            "#endif",
            ISA_DISPATCH,
            PRELUDE,
            "#include <omp.h>",
        ]
    else:
        lines += ["#include <cuda_runtime.h>", PRELUDE]
    lines += [_COMMON, "KF_DEFINE_ABI_VERSION()", ""]
    for kernel, entry in kernels:
        lines += [op_entry(kernel, entry, backend), ""]
    return "\n".join(lines)
