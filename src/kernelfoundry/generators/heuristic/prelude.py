"""C text shared by every generated unit: run-time shapes, broadcast row maps and math helpers.

`KF_HD` expands to `__host__ __device__` under nvcc and to nothing under g++, so the same helpers serve
both backends. On the CPU, KF_FAST_MATH=1 selects branch-free exp/tanh/erf approximations (relative
error below 1e-6) that g++ vectorises inside `#pragma omp simd` loops; 0 uses libm. Pure text.
"""

from __future__ import annotations

PRELUDE = r"""
#if !defined(__CUDACC__) && defined(__GNUC__) && !defined(__clang__)
/* Lets g++ if-convert selects and vectorise the math below; no effect on results (IEEE flags only). */
#pragma GCC optimize("no-trapping-math")
#endif
#ifdef __CUDACC__
#pragma nv_diag_suppress 177 /* helpers a given unit does not use */
#endif
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "kf_abi.h"

#ifdef __CUDACC__
#define KF_HD __host__ __device__ __forceinline__
#else
#define KF_HD static inline
#endif

#define KF_MAX_DIMS 8

/* Branch-free min/max that g++ vectorises without -ffast-math (libm's fmaxf is a call there). */
#ifdef __CUDACC__
#define kf_max(a, b) fmaxf((a), (b))
#define kf_min(a, b) fminf((a), (b))
#else
static inline float kf_max(float a, float b) { return a > b ? a : b; }
static inline float kf_min(float a, float b) { return a < b ? a : b; }
#endif

typedef struct { int32_t nd; int64_t d[KF_MAX_DIMS]; } kf_shape;

/* Leading-dimension strides of a (broadcast) operand against an iteration shape, for row offsets. */
typedef struct { int32_t nd; int64_t dims[KF_MAX_DIMS]; int64_t strides[KF_MAX_DIMS]; } kf_rowmap;

static inline int kf_shape_of(const kf_tensor* t, kf_shape* s) {
  if (t->ndim > KF_MAX_DIMS) return 0;
  s->nd = t->ndim;
  for (int32_t i = 0; i < t->ndim; ++i) s->d[i] = t->shape[i];
  return 1;
}

static inline kf_shape kf_trail(kf_shape s, int k) {
  for (int i = 0; i < k && s.nd < KF_MAX_DIMS; ++i) s.d[s.nd++] = 1;
  return s;
}

static inline int kf_bcast(kf_shape a, kf_shape b, kf_shape* out) {
  int nd = a.nd > b.nd ? a.nd : b.nd;
  out->nd = nd;
  for (int i = 0; i < nd; ++i) {
    int ia = i - (nd - a.nd), ib = i - (nd - b.nd);
    int64_t da = ia >= 0 ? a.d[ia] : 1, db = ib >= 0 ? b.d[ib] : 1;
    if (da != db && da != 1 && db != 1) return 0;
    out->d[i] = da == 1 ? db : da;
  }
  return 1;
}

static inline kf_shape kf_reduce(kf_shape s, int d0, int d1, int keepdim) {
  kf_shape r; r.nd = 0;
  for (int i = 0; i < s.nd; ++i) {
    if (i >= d0 && i < d1) { if (keepdim) r.d[r.nd++] = 1; }
    else r.d[r.nd++] = s.d[i];
  }
  return r;
}

static inline int64_t kf_prod(const kf_shape* s, int lo, int hi) {
  int64_t n = 1;
  for (int i = lo; i < hi; ++i) n *= s->d[i];
  return n;
}

static inline int kf_same(kf_shape a, kf_shape b) {
  if (a.nd != b.nd) return 0;
  for (int i = 0; i < a.nd; ++i) if (a.d[i] != b.d[i]) return 0;
  return 1;
}

static inline int kf_tensor_ok(const kf_tensor* t) {
  return t->dtype.code == KF_DTYPE_FLOAT && t->dtype.bits == 32 && t->dtype.lanes == 1 && kf_is_contiguous(t);
}

/* A bool tensor (a mask: one byte an element, 0 or 1), contiguous. */
static inline int kf_mask_ok(const kf_tensor* t) {
  return t->dtype.code == KF_DTYPE_BOOL && t->dtype.bits == 8 && t->dtype.lanes == 1 && kf_is_contiguous(t);
}

static inline int kf_same_shape(const kf_tensor* a, const kf_tensor* b) {
  if (a->ndim != b->ndim) return 0;
  for (int32_t i = 0; i < a->ndim; ++i) if (a->shape[i] != b->shape[i]) return 0;
  return 1;
}

static inline int kf_shape_is(const kf_tensor* t, kf_shape s) {
  kf_shape ts;
  return kf_shape_of(t, &ts) && kf_same(ts, s);
}

/* Right-align `leaf` against `S`; strides (0 where broadcast) over S's dims [0, split). `mode` says
   what the leaf must look like over [split, S.nd): 1 full (equal to S), 0 broadcast (all ones). */
static inline int kf_rowmap_make(kf_shape leaf, kf_shape S, int split, int mode, kf_rowmap* m) {
  int off = S.nd - leaf.nd;
  if (off < 0) return 0;
  int64_t stride[KF_MAX_DIMS];
  int64_t acc = 1;
  for (int i = leaf.nd - 1; i >= 0; --i) { stride[i] = acc; acc *= leaf.d[i]; }
  for (int i = split; i < S.nd; ++i) {
    int64_t ld = i - off >= 0 ? leaf.d[i - off] : 1;
    if (mode == 1 ? ld != S.d[i] : ld != 1) return 0;
  }
  m->nd = split;
  for (int i = 0; i < split; ++i) {
    int64_t ld = i - off >= 0 ? leaf.d[i - off] : 1;
    if (ld != 1 && ld != S.d[i]) return 0;
    m->dims[i] = S.d[i];
    m->strides[i] = (ld == 1) ? 0 : stride[i - off];
  }
  return 1;
}

KF_HD int64_t kf_rowmap_off(const kf_rowmap* m, int64_t r) {
  int64_t off = 0;
  for (int i = m->nd - 1; i >= 0; --i) {
    int64_t c = r % m->dims[i];
    r /= m->dims[i];
    off += c * m->strides[i];
  }
  return off;
}

/* Division by a divisor fixed at launch as a multiply-high, an add and a shift (Granlund and
   Montgomery's method): exact for dividends and divisors below 2^31; others divide in 64 bits (a
   64-bit division is a long emulated sequence on the GPU, a 32-bit one a dozen instructions). */
typedef struct { int64_t d; uint32_t m; uint32_t s; int32_t wide; } kf_divider;

static inline kf_divider kf_divider_of(int64_t d) {
  kf_divider v;
  v.d = d > 0 ? d : 1;
  v.m = 1;
  v.s = 0;
  v.wide = v.d > 0x7fffffff;
  if (!v.wide) {
    while (v.s < 31 && ((int64_t)1 << v.s) < v.d) ++v.s;
    v.m = (uint32_t)((((uint64_t)1 << 32) * (((uint64_t)1 << v.s) - (uint64_t)v.d)) / (uint64_t)v.d + 1);
  }
  return v;
}

KF_HD int64_t kf_div(kf_divider v, int64_t a) {
  if (v.wide || a < 0 || a > 0x7fffffff) return a / v.d;
  const uint32_t n = (uint32_t)a;
  const uint32_t t = (uint32_t)(((uint64_t)n * v.m) >> 32);
  return (int64_t)((t + n) >> v.s);
}

KF_HD int64_t kf_mod(kf_divider v, int64_t a) { return a - kf_div(v, a) * v.d; }

KF_HD int64_t kf_imin(int64_t a, int64_t b) { return a < b ? a : b; }

#ifdef __CUDACC__
/* 32-bit index arithmetic when the row index allows: 64-bit division is emulated on the GPU. */
__device__ __forceinline__ int64_t kf_rowmap_off_dev(const kf_rowmap& m, int64_t r) {
  if (r > 0x7fffffff) return kf_rowmap_off(&m, r);
  uint32_t rr = (uint32_t)r;
  int64_t off = 0;
  for (int i = m.nd - 1; i >= 0; --i) {
    const uint32_t d = (uint32_t)m.dims[i];
    const uint32_t q = rr / d;
    off += (int64_t)(rr - q * d) * m.strides[i];
    rr = q;
  }
  return off;
}
#endif

#ifdef __CUDACC__
__device__ __forceinline__ float kf_exp(float x) { return expf(x); }
__device__ __forceinline__ float kf_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ float kf_erf(float x) { return erff(x); }
__device__ __forceinline__ float kf_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ float kf_log1p(float x) { return log1pf(x); }
#else
#ifndef KF_FAST_MATH
#define KF_FAST_MATH 1
#endif
#if KF_FAST_MATH
/* exp by range reduction to [-ln2/2, ln2/2] and a degree-6 polynomial; no branches, no libm call. */
static inline float kf_exp(float x) {
  x = kf_min(kf_max(x, -87.0f), 88.0f);
  const float t = x * 1.44269504088896341f + 12582912.0f;
  const float k = t - 12582912.0f;
  const float r = (x - k * 0.693359375f) + k * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3333519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = ((int32_t)k + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}
static inline float kf_tanh(float x) {
  const float ax = kf_min(fabsf(x), 9.0f);
  const float e = kf_exp(-2.0f * ax);
  /* small |x|: odd Taylor series avoids the cancellation of (1-e)/(1+e) */
  const float x2 = ax * ax;
  const float small = ax * (1.0f + x2 * (-0.333333333f + x2 * (0.133333333f + x2 * -0.0539682540f)));
  const float big = (1.0f - e) / (1.0f + e);
  const float v = ax < 0.125f ? small : big;
  return x < 0.0f ? -v : v;
}
/* erf: Abramowitz-Stegun 7.1.26 (absolute error below 1.5e-7). */
static inline float kf_erf(float x) {
  const float ax = fabsf(x);
  const float t = 1.0f / (1.0f + 0.3275911f * ax);
  const float y = 1.0f - (((((1.061405429f * t - 1.453152027f) * t) + 1.421413741f) * t - 0.284496736f) * t
                          + 0.254829592f) * t * kf_exp(-ax * ax);
  return x < 0.0f ? -y : y;
}
/* sqrt without libm's errno path (which keeps g++ from vectorising sqrtf): reciprocal-sqrt bit guess and
   three Newton steps (relative error ~1e-7 for normal inputs); 0, +inf, negatives and NaN as sqrtf. */
static inline float kf_sqrt(float x) {
  int32_t i;
  memcpy(&i, &x, sizeof i);
  i = 0x5f375a86 - (i >> 1);
  float y;
  memcpy(&y, &i, sizeof y);
  const float h = 0.5f * x;
  y = y * (1.5f - h * y * y);
  y = y * (1.5f - h * y * y);
  y = y * (1.5f - h * y * y);
  const float s = x * y;
  const float edge = x == 0.0f || x == INFINITY ? x : NAN;
  return x > 0.0f && x < INFINITY ? s : edge;
}
/* log1p for x >= 0 (softplus, mish: x = exp(..)): log(u), u = 1 + x, from u's exponent and cephes' logf
   polynomial on its mantissa in [sqrt(1/2), sqrt(2)), plus (x - (u - 1)) / u for the rounding of 1 + x
   (tiny x comes back as x); libm's log1pf is a call per element that g++ cannot vectorise. Finite
   x >= 0 only; +inf and NaN as log1pf. */
static inline float kf_log1p(float x) {
  const float u = 1.0f + x;
  int32_t bits;
  memcpy(&bits, &u, sizeof bits);
  float e = (float)(((bits >> 23) & 0xff) - 126);
  bits = (bits & 0x007fffff) | 0x3f000000; /* the mantissa in [0.5, 1) */
  float m;
  memcpy(&m, &bits, sizeof m);
  const int low = m < 0.70710678f;
  e = low ? e - 1.0f : e;
  const float f = low ? m + m - 1.0f : m - 1.0f;
  const float z = f * f;
  float y = 7.0376836292e-2f;
  y = y * f - 1.1514610310e-1f;
  y = y * f + 1.1676998740e-1f;
  y = y * f - 1.2420140846e-1f;
  y = y * f + 1.4249322787e-1f;
  y = y * f - 1.6668057665e-1f;
  y = y * f + 2.0000714765e-1f;
  y = y * f - 2.4999993993e-1f;
  y = y * f + 3.3333331174e-1f;
  y = y * f * z;
  y += -2.12194440e-4f * e;
  y += -0.5f * z;
  const float r = (f + y) + 0.693359375f * e + (x - (u - 1.0f)) / u;
  return x < INFINITY ? r : x; /* +inf, NaN through */
}
#else
static inline float kf_sqrt(float x) { return sqrtf(x); }
static inline float kf_exp(float x) { return expf(x); }
static inline float kf_tanh(float x) { return tanhf(x); }
static inline float kf_erf(float x) { return erff(x); }
static inline float kf_log1p(float x) { return log1pf(x); }
#endif
#endif

#ifdef __CUDACC__
__device__ __forceinline__
#else
static inline
#endif
float kf_sigmoid(float x) { return 1.0f / (1.0f + kf_exp(-x)); }

#ifdef __CUDACC__
__device__ __forceinline__
#else
static inline
#endif
float kf_gelu(float x) { return 0.5f * x * (1.0f + kf_erf(x * 0.70710678118654752f)); }

#ifdef __CUDACC__
__device__ __forceinline__
#else
static inline
#endif
float kf_gelu_tanh(float x) {
  return 0.5f * x * (1.0f + kf_tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}
"""


def cpu_family_head(
    header: list[str],
    variant_line: str,
    tunables: tuple[str, ...],
    defaults: dict[str, int],
    fast_math: bool,
    dispatch: str,
    micro: str,
) -> list[str]:
    """The opening of a CPU GEMM-family unit: tunable declarations and guarded defaults, the prelude,
    the ABI version and the family's micro-kernel; the entry point follows."""
    lines = [*header, variant_line, *tunables]
    for name, value in defaults.items():
        lines += [f"#ifndef {name}", f"#define {name} {value}", "#endif"]
    lines += ["#ifndef KF_FAST_MATH", f"#define KF_FAST_MATH {int(fast_math)}", "#endif"]
    return [*lines, dispatch, PRELUDE, "#include <omp.h>", "", "KF_DEFINE_ABI_VERSION()", "", micro]
