"""C text both kernels of the CUDA GEMM family share (cuda_gemm.py's SIMT kernel, cuda_gemm_tc.py's
tensor-core one): the shared tiles and their load constants, the block's tile origin, load registers and
accumulators, and the tile loads (global -> registers -> k-major shared tiles, double buffered, split K).
A kernel supplies BM, BN, BK, KF_PAD, KF_TM, KF_TN, KF_A_KMAJOR, KF_B_KMAJOR, KF_TILE_NEEDED, and
`GEMM_OPERANDS` KF_KSPLIT (the block's split of K: blockIdx.z), KF_A_SRC(gm, gk) and KF_B_SRC(gk, gn)
(the addresses of A's element (gm, gk) and B's (gk, gn), rows lda and ldb floats apart: the operand's
contiguous dim, or that rounded up to a multiple of 4 where the launcher staged it, see cuda_gemm.py).
Pure strings.
"""

GEMM_OPERANDS = r"""#define KF_KSPLIT blockIdx.z
#define KF_A_SRC(gm, gk) (KF_A_KMAJOR ? X + (int64_t)(gk) * lda + (gm) : X + (int64_t)(gm) * lda + (gk))
#define KF_B_SRC(gk, gn) (KF_B_KMAJOR ? W + (int64_t)(gk) * ldb + (gn) : W + (int64_t)(gn) * ldb + (gk))
"""

TILE_DECLS = r"""  __shared__ __align__(16) float As[2][BK][BM + KF_PAD];
  __shared__ __align__(16) float Bs[2][BK][BN + KF_PAD];
  constexpr int F = VEC ? 4 : 1;  /* floats per load */
  constexpr int KU = BK / F;  /* loads per tile row (one row of x or W, BK long) */
  constexpr int AU = BM * KU, BU = BN * KU;  /* loads per tile */
  constexpr int LA = (AU + 255) / 256, LB = (BU + 255) / 256;  /* loads per thread */
"""

TILE_STATE = r"""  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  float ra[LA][F], rb[LB][F];
  float acc[KF_TM][KF_TN];
  #pragma unroll
  for (int i = 0; i < KF_TM; ++i) {
    #pragma unroll
    for (int j = 0; j < KF_TN; ++j) acc[i][j] = 0.0f;
  }
"""


# The matrix B's loops of the tile loads.
_B_LOAD = r"""    #pragma unroll
    for (int l = 0; l < LB; ++l) {
      int r, kk;
      const int e = tid + l * 256;
      at(e, BN, KF_B_KMAJOR, r, kk);
      const int gn = n0 + r, gk = k0 + kk;
      const bool ok = e < BU && gn < N && gk < ke;
      const float* src = KF_B_SRC(gk, gn);
      if constexpr (VEC) {
        const float4 v = ok ? *reinterpret_cast<const float4*>(src) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        rb[l][0] = v.x; rb[l][1] = v.y; rb[l][2] = v.z; rb[l][3] = v.w;
      } else {
        rb[l][0] = ok ? *src : 0.0f;
      }
    }
"""

_B_STORE = r"""    #pragma unroll
    for (int l = 0; l < LB; ++l) {
      int r, kk;
      const int e = tid + l * 256;
      at(e, BN, KF_B_KMAJOR, r, kk);
      if (e < BU) {
        #pragma unroll
        for (int u = 0; u < F; ++u) {
          if (KF_B_KMAJOR) Bs[b][kk][r + u] = rb[l][u];
          else Bs[b][kk + u][r] = rb[l][u];
        }
      }
    }
"""

_TILE_IO = r"""
  /* split K (blockIdx.z): this block's part [kb, ke) of K (kchunk, a multiple of BK, for every split but
     the last) */
  const int kb = KF_KSPLIT * kchunk, ke = K - kb < kchunk ? K : kb + kchunk;
  /* tile element e of an operand of R rows: row r, k offset kk. k-contiguous operands (x (M, K), W
     (N, K)) run along k, k-major ones (A given (K, M), B given (K, N)) along the rows */
  auto at = [](int e, int rows, int kmajor, int& r, int& kk) {{
    if (kmajor) {{
      kk = e / (rows / F);
      r = (e % (rows / F)) * F;
    }} else {{
      r = e / KU;
      kk = (e % KU) * F;
    }}
  }};
  /* global -> registers: slice [k0, k0 + BK) of the block's rows of x and W, zeros out of range */
  auto load = [&](int k0) {{
    #pragma unroll
    for (int l = 0; l < LA; ++l) {{
      int r, kk;
      const int e = tid + l * 256;
      at(e, BM, KF_A_KMAJOR, r, kk);
      const int gm = m0 + r, gk = k0 + kk;
      const bool ok = e < AU && gm < M && gk < ke;
      const float* src = KF_A_SRC(gm, gk);
      if constexpr (VEC) {{
        const float4 v = ok ? *reinterpret_cast<const float4*>(src) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        ra[l][0] = v.x; ra[l][1] = v.y; ra[l][2] = v.z; ra[l][3] = v.w;
      }} else {{
        ra[l][0] = ok ? *src : 0.0f;
      }}
    }}
{b_load}  }};
  /* registers -> shared buffer `b`, k-major ([k][row]): k-contiguous operands are transposed here */
  auto store = [&](int b) {{
    #pragma unroll
    for (int l = 0; l < LA; ++l) {{
      int r, kk;
      const int e = tid + l * 256;
      at(e, BM, KF_A_KMAJOR, r, kk);
      if (e < AU) {{
        #pragma unroll
        for (int u = 0; u < F; ++u) {{
          if (KF_A_KMAJOR) As[b][kk][r + u] = ra[l][u];
          else As[b][kk + u][r] = ra[l][u];
        }}
      }}
    }}
{b_store}  }};
  /* a tile the triangle zeroes skips K */
  const int slices = KF_TILE_NEEDED ? (ke - kb + BK - 1) / BK : 0;
  if (slices > 0) {{
    load(kb);
    store(0);
  }}
  __syncthreads();
"""


TILE_IO = _TILE_IO.format(b_load=_B_LOAD.rstrip("\n") + "\n", b_store=_B_STORE.rstrip("\n") + "\n")
