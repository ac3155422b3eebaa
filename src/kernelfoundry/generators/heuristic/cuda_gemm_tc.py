"""The tensor-core kernel of the CUDA GEMM family: 3xTF32 `mma.sync` at float32 accuracy.

TF32 keeps 10 bits of a float's 23-bit mantissa, too few for KernelBench's float32 tolerance (1e-4) over
long sums. Each operand is split into a TF32 "big" part and the TF32 rounding of what remains ("small":
x = big + small to about 2^-22 relative), and every product is accumulated in float32 as
big*big + big*small + small*big (the dropped small*small term is below float32's own rounding): three
m16n8k8 TF32 MMAs per product, float32-accurate results on tensor cores, where torch (TF32 off by
default) runs a SIMT SGEMM.

Same block tile (128 x 128, 256 threads), tile loads, double-buffered k-major shared tiles and epilogue
as the SIMT kernel in cuda_gemm.py; here 8 warps each own a 64 x 32 piece (4 m16 x 4 n8 MMA tiles, 64
accumulators a thread). The shared rows are padded to 136 floats (8 banks mod 32) so the fragment reads
of a warp (k = thread-in-group, row = group) hit 32 distinct banks. A unit may define BM 64 (warps of 32
x 32, for few rows: a conv's output channels; the conv family also 32, warps of 16 rows) and
KF_TF32_TERMS 1 (one TF32 product, the precision cuDNN runs float32 convs at by default: three times the
MMA rate, eager's own error) and KF_WN 8 (the conv family: warps 64 columns wide, BN 256, so each
fragment read from shared memory feeds twice the MMAs; the GEMM family keeps 4, 32 columns a warp).
Tunable: BK (8 or 16: the K slice per barrier; one or two k8 steps) and KF_MIN_BLOCKS (blocks an SM must
hold: 2 caps a thread at 128 registers, a few spills; 1 lets it take ~170, one block of 8 warps an SM).
Pure strings.
"""

from __future__ import annotations

from kernelfoundry.generators.heuristic.cuda_gemm_tiles import TILE_DECLS, TILE_STATE

TC_TUNABLES = (
    "// @kf.tunable BK in [8, 16] default 16",
    "// @kf.tunable KF_MIN_BLOCKS in [1, 2] default 2",
)
TC_DEFAULTS = {"BK": 16, "KF_MIN_BLOCKS": 2}

TC_HELPERS = r"""static_assert(KF_MIN_BLOCKS == 1 || KF_MIN_BLOCKS == 2, "KF_MIN_BLOCKS must be 1 or 2");
#ifndef BM
#define BM 128
#endif
static_assert(BM == 32 || BM == 64 || BM == 128, "BM must be 32, 64 or 128");
#ifndef KF_TF32_TERMS
#define KF_TF32_TERMS 3
#endif
static_assert(KF_TF32_TERMS == 1 || KF_TF32_TERMS == 3, "KF_TF32_TERMS must be 1 or 3");
#ifndef KF_WN
#define KF_WN 4
#endif
static_assert(KF_WN == 4 || KF_WN == 8, "KF_WN must be 4 or 8");
#define BN (32 * KF_WN)  /* 4 warps across, KF_WN n8 tiles each */
#define KF_TM (BM / 16)  /* accumulator rows a thread holds: BM / 32 m16 tiles x the row halves (g, g + 8) */
#define KF_TN (2 * KF_WN)  /* accumulator columns: KF_WN n8 tiles x two adjacent columns (2 tig, 2 tig + 1) */
#define KF_PAD 8  /* rows of 136 floats: a warp's fragment reads hit 32 distinct banks */
#ifndef KF_PREROUNDED
#define KF_PREROUNDED 0  /* 1: both operands were rounded to TF32 where the unit staged them */
#endif
static_assert(!KF_PREROUNDED || KF_TF32_TERMS == 1, "pre-rounded operands have no small part");

/* x rounded to TF32: the tensor cores ignore a TF32 operand's 13 low bits, so half a TF32 unit added
   to the bits rounds it to nearest, ties away from zero (cvt.rna.tf32's rounding) at the integer
   adder's full rate (cvt runs at a quarter of it); the low bits cleared. */
__device__ __forceinline__ uint32_t kf_round_tf32(float x) {
  return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
}

/* x's TF32 bits for one TF32 product: as staged where the unit pre-rounded it, else rounded here */
__device__ __forceinline__ uint32_t kf_tf32_bits(float x) {
  return KF_PREROUNDED ? __float_as_uint(x) : kf_round_tf32(x);
}

/* x = big + small, both TF32 (round to nearest): big * big + big * small + small * big is x * y to
   about float32 accuracy; the rest is taken from big exactly. This runs at every fragment read: with
   KF_PREROUNDED (one TF32 product) the operands already are TF32 and big is x itself, two integer
   operations a fragment register fewer (16% of level1/56's conv instructions on the H100). */
__device__ __forceinline__ void kf_split_tf32(float x, uint32_t& big, uint32_t& small) {
  big = kf_tf32_bits(x);
  small = __float_as_uint(x - __uint_as_float(big)) + 0x1000u;
}

/* An A fragment's element: as kf_split_tf32, or where the unit staged A already rounded to TF32
   (KF_A_PREROUNDED, one TF32 product: a conv's filters rounded once before the kernel) its bits as they
   are, two integer operations a fragment register fewer than rounding B alone needs */
#ifndef KF_A_PREROUNDED
#define KF_A_PREROUNDED KF_PREROUNDED
#endif
static_assert(!KF_A_PREROUNDED || KF_TF32_TERMS == 1, "a pre-rounded A has no small part");
__device__ __forceinline__ void kf_split_tf32_a(float x, uint32_t& big, uint32_t& small) {
  if (KF_A_PREROUNDED) {
    big = __float_as_uint(x);
    small = 0u;
  } else {
    kf_split_tf32(x, big, small);
  }
}

/* Four 8 x 4 float matrices from shared memory into a warp's registers (ldmatrix's 8 x 8 16-bit
   matrices: a float is two halves): lanes 8 i .. 8 i + 7 give the addresses of matrix i's rows (16
   bytes each, 16-byte aligned), and lane 4 g + t receives element t of row g of each matrix in r[i], the
   layout of an m16n8k8 TF32 fragment. One instruction where four 4-byte reads issue four. */
__device__ __forceinline__ void kf_ldsm_x4(uint32_t (&r)[4], const float* row) {
  const unsigned a = (unsigned)__cvta_generic_to_shared(row);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

/* c (16 x 8, float32) += a (16 x 8, TF32, row) * b (8 x 8, TF32, col) */
__device__ __forceinline__ void kf_mma(float& c0, float& c1, float& c2, float& c3, const uint32_t (&a)[4],
                                       uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c0), "+f"(c1), "+f"(c2), "+f"(c3)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
"""

TC_OPEN = (
    r"""
static_assert(BK == 8 || BK == 16, "BK must be 8 or 16");
"""
    + TC_HELPERS
    + r"""
/* One BM x 128 tile of the product (then bias and the tail) per block of 256 threads: warp w owns rows
   (w / 4) * BM / 2 + [0, BM / 2) and columns (w % 4) * 32 + [0, 32). VEC / vec_out as in the SIMT
   kernel. */
template <int VEC>
__global__ void __launch_bounds__(256, KF_MIN_BLOCKS)
    kf_gemm(int M, int N, int K, const float* __restrict__ X, const float* __restrict__ W,
            const float* __restrict__ bias, float* __restrict__ out, int vec_out,
            int kchunk, int lda, int ldb) {
"""
    + TILE_DECLS
    + r"""  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, tig = lane & 3;  /* the MMA fragments' group and thread in group */
  const int wm = warp >> 2, wn = warp & 3;
"""
    + TILE_STATE
)

_MMA_TILES = r"""        #pragma unroll
        for (int t = 0; t < KF_WN; ++t) {
          float& c0 = acc[mt * 2][t * 2];
          float& c1 = acc[mt * 2][t * 2 + 1];
          float& c2 = acc[mt * 2 + 1][t * 2];
          float& c3 = acc[mt * 2 + 1][t * 2 + 1];
          if (KF_TF32_TERMS == 3) {  /* the small terms first */
            kf_mma(c0, c1, c2, c3, al, bh[t][0], bh[t][1]);
            kf_mma(c0, c1, c2, c3, ah, bl[t][0], bl[t][1]);
          }
          kf_mma(c0, c1, c2, c3, ah, bh[t][0], bh[t][1]);
        }
      }
    }
"""
"""The end of a k8 step: the m16 tile mt's fragments (ah, al) against the warp's KF_WN n8 tiles' (bh, bl),
3xTF32's small terms first; then the loops of mt and k8 close."""

TC_STEP = (
    r"""    #pragma unroll
    for (int k8 = 0; k8 < BK; k8 += 8) {
      uint32_t bh[KF_WN][2], bl[KF_WN][2];
      #pragma unroll
      for (int t = 0; t < KF_WN; ++t) {
        const int c = wn * (8 * KF_WN) + t * 8 + g;
        kf_split_tf32(KF_B_FRAG(k8 + tig, c), bh[t][0], bl[t][0]);
        kf_split_tf32(KF_B_FRAG(k8 + tig + 4, c), bh[t][1], bl[t][1]);
      }
      #pragma unroll
      for (int mt = 0; mt < KF_TM / 2; ++mt) {
        const int r = wm * (BM / 2) + mt * 16 + g;
        uint32_t ah[4], al[4];
        kf_split_tf32_a(KF_A_FRAG(k8 + tig, r), ah[0], al[0]);
        kf_split_tf32_a(KF_A_FRAG(k8 + tig, r + 8), ah[1], al[1]);
        kf_split_tf32_a(KF_A_FRAG(k8 + tig + 4, r), ah[2], al[2]);
        kf_split_tf32_a(KF_A_FRAG(k8 + tig + 4, r + 8), ah[3], al[3]);
"""
    + _MMA_TILES
)
"""One shared tile's MMAs: BK / 8 k8 steps of the warp's (BM / 2) x (8 KF_WN) piece. The loop supplies
KF_A_FRAG(k, r) and KF_B_FRAG(k, c): the shared elements A(r, k) and B(k, c) of the slice in use."""

TC_STEP_K16 = r"""    #pragma unroll
    for (int k16 = 0; k16 < BK; k16 += 16) {
      /* k slots 4 tig + {0, 1} are the first k8 step's (tig, tig + 4), 4 tig + {2, 3} the second's */
      float4 bq[KF_WN];
      #pragma unroll
      for (int t = 0; t < KF_WN; ++t) {
        bq[t] = *reinterpret_cast<const float4*>(&KF_B_FRAG(k16 + 4 * tig, wn * (8 * KF_WN) + t * 8 + g));
      }
      #pragma unroll
      for (int mt = 0; mt < KF_TM / 2; ++mt) {
        const int r = wm * (BM / 2) + mt * 16 + g;
        const float4 p = *reinterpret_cast<const float4*>(&KF_A_FRAG(k16 + 4 * tig, r));
        const float4 q = *reinterpret_cast<const float4*>(&KF_A_FRAG(k16 + 4 * tig, r + 8));
        const uint32_t a0[4] = {kf_tf32_bits(p.x), kf_tf32_bits(q.x), kf_tf32_bits(p.y), kf_tf32_bits(q.y)};
        const uint32_t a1[4] = {kf_tf32_bits(p.z), kf_tf32_bits(q.z), kf_tf32_bits(p.w), kf_tf32_bits(q.w)};
        #pragma unroll
        for (int t = 0; t < KF_WN; ++t) {
          float& c0 = acc[mt * 2][t * 2];
          float& c1 = acc[mt * 2][t * 2 + 1];
          float& c2 = acc[mt * 2 + 1][t * 2];
          float& c3 = acc[mt * 2 + 1][t * 2 + 1];
          kf_mma(c0, c1, c2, c3, a0, kf_tf32_bits(bq[t].x), kf_tf32_bits(bq[t].y));
          kf_mma(c0, c1, c2, c3, a1, kf_tf32_bits(bq[t].z), kf_tf32_bits(bq[t].w));
        }
      }
    }
"""
"""TC_STEP with 16-byte fragment reads, for one TF32 product over k-contiguous A and B rows (KF_A_FRAG(k,
r) and KF_B_FRAG(k, c) adjacent in k, 16-byte aligned at every fourth k): each k16 of the slice is two k8
steps whose fragments take the slots 4 tig .. 4 tig + 3 of a row, one LDS.128 where TC_STEP issues four
LDS.32. Which k a slot holds does not matter: A's and B's slots pair the same way, so the sum over the
16 is the same products. On the H100, level1/56's conv stalled on the full shared-memory instruction
queue (mio_throttle) 1.05 cycles an issue, cuDNN's kernel 0.07 (Nsight Compute); with this step 0.23, but
its warps then wait on the wide reads themselves (short_scoreboard 0.08 -> 0.71: at 234 registers there
are none to load the next k16 ahead), and 8 of 11 level-1 convs ran 1-18% slower (71 and 78 5-7% faster,
76 the same): the conv family declares it a tunable, off by default."""

TC_STEP_LDSM = (
    r"""    #pragma unroll
    for (int k8 = 0; k8 < BK; k8 += 8) {
      uint32_t bh[KF_WN][2], bl[KF_WN][2];
      #pragma unroll
      for (int t = 0; t < KF_WN; t += 2) {
        /* matrices (tile t, k 0-3), (t, k 4-7), (t + 1, k 0-3), (t + 1, k 4-7): b0, b1 of two n8 tiles */
        const int c = wn * (8 * KF_WN) + (t + (lane >> 4)) * 8 + (lane & 7);
        uint32_t q[4];
        kf_ldsm_x4(q, &KF_B_FRAG(k8 + (lane & 8) / 2, c));
        #pragma unroll
        for (int i = 0; i < 4; ++i) {
          kf_split_tf32(__uint_as_float(q[i]), bh[t + i / 2][i % 2], bl[t + i / 2][i % 2]);
        }
      }
      #pragma unroll
      for (int mt = 0; mt < KF_TM / 2; ++mt) {
        /* matrices (rows 0-7, k 0-3), (8-15, k 0-3), (0-7, k 4-7), (8-15, k 4-7): a0 .. a3 */
        uint32_t q[4], ah[4], al[4];
        kf_ldsm_x4(q, &KF_A_FRAG(k8 + (lane >> 4) * 4, wm * (BM / 2) + mt * 16 + (lane & 15)));
        #pragma unroll
        for (int i = 0; i < 4; ++i) kf_split_tf32(__uint_as_float(q[i]), ah[i], al[i]);
"""
    + _MMA_TILES
)
"""TC_STEP with the fragments read by `ldmatrix` (kf_ldsm_x4), for k-contiguous A and B rows (KF_A_FRAG(k,
r) and KF_B_FRAG(k, c) adjacent in k, rows 16-byte aligned at every fourth k): one instruction reads an
m16 tile's A fragment of a k8 step, one the B fragments of two n8 tiles, where TC_STEP issues four
4-byte reads for each: the same registers a k8 step, a quarter of the shared-memory instructions (the
queue level1/56's conv stalled on, Nsight Compute on the H100). With one TF32 product
(KF_TF32_TERMS 1) the split keeps only the big part, the fragment's bits where KF_PREROUNDED."""

TC_LOOP = (
    r"""
#define KF_A_FRAG(k, r) As[cur][k][r]
#define KF_B_FRAG(k, c) Bs[cur][k][c]
  for (int s = 0; s < slices; ++s) {
    const int cur = s & 1;
    if (s + 1 < slices) load(kb + (s + 1) * BK);  /* in flight while this slice is multiplied */
"""
    + TC_STEP
    + r"""    if (s + 1 < slices) store(cur ^ 1);  /* the other buffer: last read before the last barrier */
    __syncthreads();
  }
"""
)
