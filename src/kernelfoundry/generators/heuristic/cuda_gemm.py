"""CUDA tiled SGEMM with a fused epilogue: `nn.Linear` + its tail, or a matmul, in one kernel, no glue.

The CUDA counterpart of cpu_gemm.py, for the graphs `gemm_plan` accepts whose tail is a pointwise chain
over the product or a pointwise chain followed by a sum / mean over the features, and for a bare matmul
`A @ B` (torch.matmul, torch.mm, `@`; either operand given transposed, A's leading dims its rows) alone
or keeping one triangle (torch.triu / tril). Softmax and log-softmax tails keep cuBLAS + the fused row
kernel; max / min tails are refused too: a float atomic max needs a CAS loop and an output filled with
-inf first, and no task needs one.

y = x W^T + b with x (M, K) and W (N, K) K-contiguous ("NT"); a matmul reads A as (M, K) or, given
transposed, (K, M), and B as (K, N) or, given transposed, (N, K) (KF_A_KMAJOR / KF_B_KMAJOR: a k-major
operand's tile loads run along its rows and land in shared memory untransposed). fp32 FMAs only (no
TF32, no tensor cores). A classic SIMT SGEMM:
- one block of 256 threads per BM x BN output tile (a 16 x 16 thread grid), each thread a register
  tile of KF_TM x KF_TN = (BM / 16) x (BN / 16) accumulators (`float acc[KF_TM][KF_TN]`, 8 x 8 at the
  defaults); a thread's rows are runs of 4 rows 64 apart (likewise its columns), so the inner loop
  reads float4s of the shared tiles without bank conflicts and the stores of a warp cover whole rows;
- K is walked in BK slices; the two tiles of a slice are loaded (float4 where every operand's
  contiguous dim is a multiple of 4 and both pointers are 16-byte aligned, checked on the host: the
  `kf_gemm<1>` instance, else the scalar-load `kf_gemm<0>`) and stored k-major into shared memory as
  As[BK][BM + 4] / Bs[BK][BN + 4] (the pad spreads the transposing stores of K-contiguous operands over
  the banks: conflict-free at BK = 8, two-way at 16), double buffered: the next slice is loaded into
  registers while the current one is multiplied, one barrier per slice;
- any M, N, K: out-of-range rows / columns / k load as 0, stores are guarded;
- epilogue on the accumulators: bias, then the tail per element (or the kept triangle: a block whose
  tile the triangle zeroes skips its K loop), stored once (float4 stores where the output rows allow); a
  sum / mean tail reduces the thread's columns, then the 16 threads of a row (half a warp) by shuffles,
  and adds the block's partial into out[row] with atomicAdd (the output is zeroed on the stream first;
  a mean scales each partial by 1 / N).

Tunables: BM, BN (64 or 128: the block tile, so the register tile is 4 or 8 rows / columns) and BK (8 or
16: the K slice per barrier). Pure string building.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelfoundry.generators.heuristic.cpu_gemm import GemmPlan, gemm_plan, linear_operands, matmul_operands
from kernelfoundry.generators.heuristic.cuda import ALLOC
from kernelfoundry.generators.heuristic.cuda_gemm_tc import TC_DEFAULTS, TC_LOOP, TC_OPEN, TC_TUNABLES
from kernelfoundry.generators.heuristic.cuda_gemm_tiles import GEMM_OPERANDS, TILE_DECLS, TILE_IO, TILE_STATE
from kernelfoundry.generators.heuristic.graph import Graph, Ref
from kernelfoundry.generators.heuristic.plan import Leaf
from kernelfoundry.generators.heuristic.prelude import PRELUDE
from kernelfoundry.generators.heuristic.stepexpr import emit
from kernelfoundry.generators.heuristic.variant import Variant

CUDA_GEMM_TUNABLES = (
    "// @kf.tunable BM in [64, 128] default 128",
    "// @kf.tunable BN in [64, 128] default 128",
    "// @kf.tunable BK in [8, 16] default 8",
)
_DEFAULTS = {"BM": 128, "BN": 128, "BK": 8}
_CUDA_REDUCTIONS = ("sum", "mean")


@dataclass(frozen=True)
class TileLayout:
    """Where a kernel's accumulators sit in the output tile, for the shared epilogue."""

    row: str  # the output row of accumulator row i
    col: str  # the output column of accumulator column j
    run: int  # consecutive columns a thread holds: one float4 / float2 store
    run_col: str  # the first column of the thread's q-th run
    row_lanes: tuple[int, ...]  # shuffle offsets that join the lanes sharing a row
    leader: str  # the lane that adds a row's partial


# A vectorised unit whose operand rows are no float4 runs (a contiguous dim not a multiple of 4:
# level1/8_Matmul_with_irregular_shapes_, K 2949 and N 5921) copies them into rows padded with zeros
# to a multiple of 4 before the product (kf_stage), when the product's multiply-adds are at least this
# many times the floats copied: there the copy costs a few percent of the product, and the tile loads
# of the padded rows are float4 (the scalar-load kernel ran that matmul at 66% of its floor on the
# H200, 0.76x eager, where the float4 one runs the aligned matmuls at ~100%).
STAGE_RATIO = 1024

STAGE = r"""
/* `rows` rows of `cols` floats copied into rows of `ld` floats (ld >= cols, a multiple of 4) with zeros
   after each row: a block a row at a time */
__global__ void __launch_bounds__(256) kf_stage_rows(const float* __restrict__ src, float* __restrict__ dst,
                                                     int64_t rows, int cols, int ld) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    for (int c = threadIdx.x; c < ld; c += blockDim.x) dst[r * ld + c] = c < cols ? src[r * cols + c] : 0.0f;
  }
}

/* The operand `src` (rows x *ld) staged into rows padded to a multiple of 4, on the stream: src itself
   when its rows already are float4 runs or no memory was had (then *ld unchanged) */
static const float* kf_stage(const float* src, int64_t rows, int* ld, float** staged, cudaStream_t st) {
  if (*ld % 4 == 0 && ((uintptr_t)src) % 16 == 0) return src;
  const int padded = (*ld + 3) / 4 * 4;
  float* dst = kf_alloc(sizeof(float) * (size_t)(rows * padded), st);
  if (dst == nullptr) return src;
  kf_stage_rows<<<(unsigned)(rows < 65536 ? rows : 65536), 256, 0, st>>>(src, dst, rows, *ld, padded);
  *ld = padded;
  *staged = dst;
  return dst;
}
"""

_SIMT = TileLayout(
    row="m0 + (i >> 2) * 64 + ty * 4 + (i & 3)",
    col="n0 + (j >> 2) * 64 + tx * 4 + (j & 3)",
    run=4,
    run_col="n0 + q * 64 + tx * 4",
    row_lanes=(8, 4, 2, 1),  # the 16 threads of a row are one half of a warp
    leader="tx == 0",
)
TC_LAYOUT = TileLayout(
    row="m0 + wm * (BM / 2) + (i >> 1) * 16 + (i & 1) * 8 + g",
    col="n0 + wn * (8 * KF_WN) + (j >> 1) * 8 + tig * 2 + (j & 1)",
    run=2,
    run_col="n0 + wn * (8 * KF_WN) + q * 8 + tig * 2",
    row_lanes=(1, 2),  # the 4 threads of an MMA group share its rows
    leader="tig == 0",
)

_SIMT_OPEN = (
    r"""
static_assert(BM == 64 || BM == 128, "BM must be 64 or 128");
static_assert(BN == 64 || BN == 128, "BN must be 64 or 128");
static_assert(BK == 8 || BK == 16, "BK must be 8 or 16");
#define KF_TM (BM / 16)  /* rows per thread: runs of 4 rows 64 apart (two at BM = 128) */
#define KF_TN (BN / 16)  /* columns per thread, likewise */
#define KF_PAD 4  /* shared tiles' row pad: transposing stores spread over the banks, float4-aligned rows */

/* One BM x BN tile of y = x W^T (+ b, then the tail) per block of 256 threads; at most 128 registers
   per thread, so two blocks share an SM. VEC: float4 loads of x and W (K % 4 == 0, 16-byte aligned
   pointers); vec_out: float4 stores (N % 4 == 0, aligned output). */
template <int VEC>
__global__ void __launch_bounds__(256, 2) kf_gemm(int M, int N, int K, const float* __restrict__ X,
                                                  const float* __restrict__ W, const float* __restrict__ bias,
                                                  float* __restrict__ out, int vec_out, int kchunk,
                                                  int lda, int ldb) {
"""
    + TILE_DECLS
    + r"""  const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
"""
    + TILE_STATE
)

_SIMT_LOOP = r"""
  for (int s = 0; s < slices; ++s) {
    const int cur = s & 1;
    if (s + 1 < slices) load(kb + (s + 1) * BK);  /* in flight while this slice is multiplied */
    #pragma unroll
    for (int k = 0; k < BK; ++k) {
      float a[KF_TM], b[KF_TN];
      #pragma unroll
      for (int p = 0; p < KF_TM / 4; ++p) {
        const float4 v = *reinterpret_cast<const float4*>(&As[cur][k][p * 64 + ty * 4]);
        a[p * 4] = v.x; a[p * 4 + 1] = v.y; a[p * 4 + 2] = v.z; a[p * 4 + 3] = v.w;
      }
      #pragma unroll
      for (int q = 0; q < KF_TN / 4; ++q) {
        const float4 v = *reinterpret_cast<const float4*>(&Bs[cur][k][q * 64 + tx * 4]);
        b[q * 4] = v.x; b[q * 4 + 1] = v.y; b[q * 4 + 2] = v.z; b[q * 4 + 3] = v.w;
      }
      #pragma unroll
      for (int i = 0; i < KF_TM; ++i) {
        #pragma unroll
        for (int j = 0; j < KF_TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
      }
    }
    if (s + 1 < slices) store(cur ^ 1);  /* the other buffer: last read before the previous barrier */
    __syncthreads();
  }
"""


def cuda_gemm_plan(graph: Graph) -> GemmPlan | None:
    """The plan when the CUDA GEMM family applies: a linear with a pointwise tail, or a pointwise chain
    and a sum / mean over the features; a matmul `A @ B` (either operand given transposed, A's leading
    dims its rows) alone, keeping one triangle, or with such a tail. None otherwise (softmax,
    log-softmax, max and min tails; no linear or matmul)."""
    plan = gemm_plan(graph)
    if plan is None:
        return None
    if plan.step is None:
        return plan if plan.matmul else None
    if plan.step.kind == "pointwise":
        return plan
    if plan.step.kind == "reduction" and plan.step.root.op in _CUDA_REDUCTIONS:
        return plan
    return None


def cuda_gemm_applies(graph: Graph) -> bool:
    return cuda_gemm_plan(graph) is not None


def _epilogue(graph: Graph, plan: GemmPlan, at: TileLayout) -> list[str]:
    """The end of the kernel: bias, the tail per accumulator, the stores (or the row partials)."""
    step = plan.step
    lin = plan.linear.name

    def load(leaf: Leaf) -> str:
        assert leaf.name == lin
        return "y"

    out: list[str] = []
    w = out.append
    bias = " + bz[j]" if plan.bias else ""
    if plan.bias:
        w("  float bz[KF_TN];")
        w("  #pragma unroll")
        w("  for (int j = 0; j < KF_TN; ++j) {")
        w(f"    const int c = {at.col};")
        w("    bz[j] = c < N ? bias[c] : 0.0f;")
        w("  }")
    else:
        w("  (void)bias;")
    if step is not None and step.kind != "pointwise":
        w("  (void)vec_out;")
    w("  #pragma unroll")
    w("  for (int i = 0; i < KF_TM; ++i) {")
    w(f"    const int r = {at.row};")
    if step is None or step.kind == "pointwise":
        w("    float v[KF_TN];")
        w("    #pragma unroll")
        w("    for (int j = 0; j < KF_TN; ++j) {")
        if step is None:
            w(
                "      v[j] = acc[i][j];"
                if not plan.triangle
                else f"      v[j] = {_triangle_value(plan, at)};"
            )
        else:
            body, val = emit(graph, step, Ref(step.root.name), load, indent="      ")
            w(f"      const float y = acc[i][j]{bias};")
            out.extend(body)
            w(f"      v[j] = {val};")
        w("    }")
        out.extend(store_row(at, splits_k(plan)))
    else:
        src = step.root.args[0]
        assert isinstance(src, Ref)
        body, val = emit(graph, step, src, load, indent="      ")
        scale = " * (1.0f / (float)N)" if step.root.op == "mean" else ""
        w("    float part = 0.0f;")
        w("    #pragma unroll")
        w("    for (int j = 0; j < KF_TN; ++j) {")
        w(f"      const int c = {at.col};")
        w(f"      const float y = acc[i][j]{bias};")
        out.extend(body)
        w(f"      part += c < N ? {val} : 0.0f;")
        w("    }")
        w("    /* the lanes that hold this row's other columns */")
        for lane in at.row_lanes:
            w(f"    part += __shfl_xor_sync(0xffffffffu, part, {lane});")
        w(f"    if ({at.leader} && r < M) atomicAdd(&out[r], part{scale});")
    w("  }")
    w("}")
    return out


def store_row(at: TileLayout, split: bool) -> list[str]:
    """Stores of accumulator row i's values `v[KF_TN]` to output row r (`out + r * N`): float4 / float2
    runs where `vec_out`, guarded scalars at the edge; `split`: added atomically when K is split."""
    out: list[str] = []
    w = out.append
    w("    if (r < M) {")
    w("      float* __restrict__ orow = out + (int64_t)r * N;")
    n = at.run
    if split:
        w("      if (gridDim.z > 1) {  /* split K: the partial products add into the zeroed output */")
        w("        #pragma unroll")
        w(f"        for (int q = 0; q < KF_TN / {n}; ++q) {{")
        w(f"          const int c = {at.run_col};")
        w("          #pragma unroll")
        w(f"          for (int u = 0; u < {n}; ++u)")
        w(f"            if (c + u < N) atomicAdd(orow + c + u, v[q * {n} + u]);")
        w("        }")
        w("        continue;")
        w("      }")
    w("      #pragma unroll")
    w(f"      for (int q = 0; q < KF_TN / {n}; ++q) {{")
    w(f"        const int c = {at.run_col};")
    w(f"        if (vec_out && c < N) {{  /* N % 4 == 0: the whole run of {n} is in range */")
    if n == 4:
        w("          *reinterpret_cast<float4*>(orow + c) =")
        w("              make_float4(v[q * 4], v[q * 4 + 1], v[q * 4 + 2], v[q * 4 + 3]);")
    else:
        w("          *reinterpret_cast<float2*>(orow + c) = make_float2(v[q * 2], v[q * 2 + 1]);")
    w("        } else {")
    w("          #pragma unroll")
    w(f"          for (int u = 0; u < {n}; ++u)")
    w(f"            if (c + u < N) orow[c + u] = v[q * {n} + u];")
    w("        }")
    w("      }")
    w("    }")
    return out


def splits_k(plan: GemmPlan) -> bool:
    """Whether the unit may split K across blocks (a bare matmul, or one triangle of it: the partial
    products add up in the output; a tail would need the whole sum first)."""
    return plan.matmul and plan.step is None


def _triangle_value(plan: GemmPlan, at: TileLayout) -> str:
    """Accumulator (i, j) where the kept triangle holds it, else 0 (torch.triu / tril's diagonal)."""
    keep = ">=" if plan.triangle == "triu" else "<="
    return f"({at.col}) - r {keep} {plan.diagonal} ? acc[i][j] : 0.0f"


def _tile_needed(plan: GemmPlan) -> str:
    """The kernel's test whether its block tile holds any kept element (a triangle zeroes whole tiles:
    they skip the K loop and store zeros)."""
    if plan.triangle == "triu":  # kept where c - r >= d: the tile's largest c - r
        return f"(n0 + BN - 1 - m0 >= {plan.diagonal})"
    if plan.triangle == "tril":  # kept where c - r <= d: the tile's smallest c - r
        return f"(n0 - (m0 + BM - 1) <= {plan.diagonal})"
    return "1"


def _operands(plan: GemmPlan) -> list[str]:
    """Entry-point lines that check the operands and name X (A or x), W (B or the weight), B (the bias
    or null), M, N, K."""
    if not plan.matmul:
        return linear_operands(plan, "const float*", "B", "nullptr")
    lines = matmul_operands(plan)
    if plan.x_transposed:
        lines.append("  const float* __restrict X = XT;  /* (K, M): read k-major by the tile loads */")
    lines.append("  const float* B = nullptr;")
    return lines


def cuda_gemm_unit(graph: Graph, plan: GemmPlan, variant: Variant, header: list[str]) -> str:
    """The whole .cu unit: tunables, prelude, the GEMM kernel with its epilogue, `kf_forward`."""
    tc = variant.tensor_cores
    lines = [*header, variant.line(), *(TC_TUNABLES if tc else CUDA_GEMM_TUNABLES)]
    for name, value in (TC_DEFAULTS if tc else _DEFAULTS).items():
        lines += [f"#ifndef {name}", f"#define {name} {value}", "#endif"]
    lines += ["#include <cuda_runtime.h>", PRELUDE, "", "KF_DEFINE_ABI_VERSION()"]
    if variant.vectorize:
        lines += [f"#ifndef KF_STAGE_RATIO\n#define KF_STAGE_RATIO {STAGE_RATIO}\n#endif", ALLOC, STAGE]
    lines += [
        f"#define KF_A_KMAJOR {int(plan.x_transposed)}  /* A given as (K, M) */",
        f"#define KF_B_KMAJOR {int(plan.matmul and not plan.weight_nk)}  /* B given as (K, N) */",
        f"#define KF_TILE_NEEDED {_tile_needed(plan)}",
        GEMM_OPERANDS.rstrip("\n"),
        (TC_OPEN if tc else _SIMT_OPEN).rstrip("\n"),
        TILE_IO.rstrip("\n"),
        (TC_LOOP if tc else _SIMT_LOOP).rstrip("\n"),
    ]
    lines += _epilogue(graph, plan, TC_LAYOUT if tc else _SIMT)
    lines.append("")
    reduce = plan.step is not None and plan.step.kind == "reduction"
    vec = variant.vectorize
    w = lines.append
    w("KF_EXPORT int kf_forward(const kf_tensor* inputs, int32_t n_inputs, kf_tensor* outputs,")
    w("                         int32_t n_outputs, void* stream) {")
    w("  cudaStream_t st = (cudaStream_t)stream;")
    lines += _operands(plan)
    w("  if (!kf_tensor_ok(&outputs[0]) || !kf_shape_of(&outputs[0], &so)) return KF_ERR_BAD_ARGUMENTS;")
    if reduce:
        w("  if (kf_prod(&so, 0, so.nd) != M || so.nd < 1 || so.d[0] != M) return KF_ERR_BAD_ARGUMENTS;")
    else:  # a matmul's output keeps A's leading dims
        w("  if (so.nd < 2 || kf_prod(&so, 0, so.nd - 1) != M || so.d[so.nd - 1] != N)")
        w("    return KF_ERR_BAD_ARGUMENTS;")
    w("  float* O = KF_DATA(float, &outputs[0]);")
    w("  if (M >= ((int64_t)1 << 31) || N >= ((int64_t)1 << 31) || K >= ((int64_t)1 << 31))")
    w("    return KF_ERR_UNSUPPORTED;")
    w("  const int64_t mtiles = (M + BM - 1) / BM, ntiles = (N + BN - 1) / BN;")
    w("  if (mtiles > 65535) return KF_ERR_UNSUPPORTED;")
    if reduce:
        w("  /* every block adds its partial row sums into the output: zero it first, on the stream */")
        w("  if (M > 0 && cudaMemsetAsync(O, 0, sizeof(float) * (size_t)M, st) != cudaSuccess)")
        w("    return KF_ERR_LAUNCH;")
    w("  if (M == 0 || N == 0) return KF_OK;")
    w("  int splits = 1;")
    if splits_k(plan):
        w("  /* few output tiles over a long K (a 256 x 256 product of K = 524288) leave most SMs idle:")
        w("     split K across blocks until about two blocks an SM, each split at least 1024 of K long */")
        w("  static int sms = 0;")
        w("  if (sms == 0) {")
        w("    int device = 0;")
        w("    if (cudaGetDevice(&device) != cudaSuccess ||")
        w("        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess)")
        w("      return KF_ERR_LAUNCH;")
        w("  }")
        w("  const int64_t tiles = mtiles * ntiles, want = (2 * (int64_t)sms + tiles - 1) / tiles;")
        w("  if (tiles < sms && K >= 2048) splits = (int)(want < K / 1024 ? want : K / 1024);")
    w("  /* K = 0 (an empty sum: zeros): one split whose part of K is empty */")
    w("  const int64_t kchunk = K > 0 ? ((K + splits - 1) / splits + BK - 1) / BK * BK : BK;")
    w("  splits = K > 0 ? (int)((K + kchunk - 1) / kchunk) : 1;")
    if splits_k(plan):
        w("  if (splits > 1 && cudaMemsetAsync(O, 0, sizeof(float) * (size_t)(M * N), st) != cudaSuccess)")
        w("    return KF_ERR_LAUNCH;")
    w("  const dim3 grid((unsigned)ntiles, (unsigned)mtiles, (unsigned)splits);")
    a_rows, a_ld = ("K", "M") if plan.x_transposed else ("M", "K")
    b_rows, b_ld = ("K", "N") if plan.matmul and not plan.weight_nk else ("N", "K")
    w(f"  int lda = (int){a_ld}, ldb = (int){b_ld};  /* the operands' row strides */")
    args = "((int)M, (int)N, (int)K, XA, WB, B, O, vec_out, (int)kchunk, lda, ldb)"
    if vec:
        w("  /* rows that are no float4 runs are staged padded where the product dwarfs the copy */")
        w("  float* staged[2] = {nullptr, nullptr};")
        w("  const float* XA = X;")
        w("  const float* WB = W;")
        w(f"  const double copied = (double){a_rows} * lda + (double){b_rows} * ldb;")
        w("  if ((double)M * (double)N * (double)K >= KF_STAGE_RATIO * copied) {")
        w(f"    XA = kf_stage(X, {a_rows}, &lda, &staged[0], st);")
        w(f"    WB = kf_stage(W, {b_rows}, &ldb, &staged[1], st);")
        w("  }")
        w("  const int vec = lda % 4 == 0 && ldb % 4 == 0 &&")
        w("                  ((uintptr_t)XA) % 16 == 0 && ((uintptr_t)WB) % 16 == 0;")
        if reduce:
            w("  const int vec_out = 0;")
        else:
            w("  const int vec_out = N % 4 == 0 && ((uintptr_t)O) % 16 == 0;")
        w("  if (vec)")
        w(f"    kf_gemm<1><<<grid, 256, 0, st>>>{args};")
        w("  else")
        w(f"    kf_gemm<0><<<grid, 256, 0, st>>>{args};")
        w("  for (float* p : staged)")
        w("    if (p != nullptr) cudaFreeAsync(p, st);  /* stream-ordered: after the product */")
    else:
        w("  const float* XA = X;")
        w("  const float* WB = W;")
        w("  const int vec_out = 0;  /* scalar loads and stores only (the unvectorised variant) */")
        w(f"  kf_gemm<0><<<grid, 256, 0, st>>>{args};")
    w("  if (cudaGetLastError() != cudaSuccess) return KF_ERR_LAUNCH;")
    w("  return KF_OK;")
    w("}")
    w("")
    return "\n".join(lines)
