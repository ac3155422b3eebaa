"""CUDA fused rows held on chip: a reduction over a long row and its broadcast consumer (x / mean(|x|),
x / norm(x)) reading the row from DRAM once.

The fused rows kernel of cuda.py reduces its row, then reads it again for the consumer: from L2 while
the rows in flight fit it, from DRAM when they are long (level1/38_L1Norm_ and 39_L2Norm_: rows of 65,535
floats at four blocks an SM; two reads and a write, 65% of the bandwidth floor on the H200). Here one
block of 1024 threads holds its row while it reduces it: ONCHIP_PT elements a thread in registers, the
rest in dynamic shared memory (each thread keeps its own elements, so no barrier guards them), so a row
of up to ONCHIP_MAX_ROW elements is read once and written once. One block an SM: its loads stop while
it reduces, which the other SMs' rows, at other phases, cover.

Where it applies: the consumer reads one full operand, the one the reduction reads, at the same element
(the usual norm); otherwise nothing is emitted. Switched by the unit's FUSED_ROWS_IN_REGISTERS tunable.

The row ops (softmax, log_softmax, layer, group and instance norms) of the `cache_rows` variant, whose
rows outgrow the registers of a block (`_regs`), are held the same way by a thread block cluster
(`_crows`, launched with cudaLaunchKernelEx and a cluster dimension of 1 to CLUSTER_MOST blocks): each
block holds a share of the row, and every statistic (max, sum, mean, variance) is reduced across the
cluster through distributed shared memory (`kf_cluster_reduce`), so rows of up to 587,456 floats
(level1/24_LogSoftmax's 393,216, 34_InstanceNorm's 262,144) are read once and written once instead of
two or three reads. Its shared memory is all dynamic (the scratch, two exchange slots, the share), and a
block leaves only after the cluster's last barrier, so that no block reads a slot of one that has left.

Rows longer than a cluster holds (level1/35_GroupNorm_'s groups of 2,097,152 floats: 8 MB, where the
portable cluster holds 2.3) are held by co-resident blocks of the whole grid (`_grows`, launched
cooperatively, so every block runs at once or the launch fails): as many blocks a row as its shares
need, spread so that the rows in flight fill the device's blocks, each statistic exchanged through
global memory (`kf_grid_reduce`: a block's total to its slot of the row, then its arrival flag, which
the row's blocks wait on, the slots combined in rank order so every block gets the same total). Without it
such rows take the split kernels' two reads and a write. Switched by the unit's KF_GRID_ROWS tunable.
Pure string building.
"""

from __future__ import annotations

from kernelfoundry.generators.heuristic.cuda_rows import RowKernels
from kernelfoundry.generators.heuristic.entry import ptr
from kernelfoundry.generators.heuristic.expressions import literal
from kernelfoundry.generators.heuristic.graph import Ref
from kernelfoundry.generators.heuristic.plan import Leaf, Step
from kernelfoundry.generators.heuristic.stepexpr import emit

ONCHIP_THREADS = 1024
ONCHIP_PT = 16  # row elements a thread holds in registers (16 of the 64 a thread has at 1024 threads)
ONCHIP_SMEM_FLOATS = 50176  # shared memory for the rest: 196 KB of the 227 KB a block may take
ONCHIP_MIN_ROW = ONCHIP_THREADS * ONCHIP_PT  # shorter rows: the re-read hits cache (cuda.py's kernel)
ONCHIP_MAX_ROW = ONCHIP_MIN_ROW + ONCHIP_SMEM_FLOATS
CACHED = "kf_c"  # the held element, in place of the operand's load

# The row ops (softmax, log_softmax, the norms) over rows too long for one SM: a cluster of up to
# CLUSTER_MOST blocks holds a row, each block a share (ONCHIP_PT elements a thread in registers, the rest in
# shared memory), the row statistics reduced across the cluster through distributed shared memory.
CLUSTER_MOST = 8  # the portable cluster size
CLUSTER_SMEM_FLOATS = 58112  # the 227 KB a block may take: scratch, the exchange slots and the share
CLUSTER_SCRATCH = ONCHIP_THREADS + 33  # the block reduction's scratch (kf_block_reduce_*)
CLUSTER_XCHG = (CLUSTER_SCRATCH + 3) // 4 * 4  # the two exchange slots, past the scratch
CLUSTER_HEAD = CLUSTER_XCHG + 4  # floats before the share, which starts 16-byte aligned
CLUSTER_SHARE = ONCHIP_MIN_ROW + CLUSTER_SMEM_FLOATS - CLUSTER_HEAD  # elements a block holds at most
SLOT = "kf_slot"  # the held element's storage, in a statistic that rewrites it (softmax's exp)
# Rows beyond a cluster: held by co-resident blocks of the grid (`_grows`), each block's share at most
# KF_GRID_SHARE elements (CLUSTER_SHARE; a macro, so a test can make rows of a few shares), the row's
# statistics exchanged through GRID_PHASES slots a block in global memory.
GRID_PHASES = 4  # statistics a row op reduces at most (two: max and sum, or mean and variance)
GRID_TUNABLES = ("// @kf.tunable KF_GRID_ROWS in [0, 1] default 0",)
GRID_DEFAULTS = (("KF_GRID_ROWS", 0), ("KF_GRID_SHARE", CLUSTER_SHARE), ("KF_CLUSTER_MOST", CLUSTER_MOST))


def cluster_reduce(block_reduce: str) -> str:
    """`kf_cluster_reduce`, each block's total taken by `block_reduce` (the unit's block reduction:
    kf_block_reduce_warp or kf_block_reduce_tree)."""
    return (
        r"""
/* v reduced over the blocks of the thread block cluster; every thread of every block gets the result.
   Each block's total (the unit's block reduction) goes to its exchange slot `xchg[parity]`; after the
   cluster's barrier every block combines the slots of all through distributed shared memory. Two slots
   used in turn: a block writes one only after the barrier that follows every block's reading of it. */
template <int OP>
__device__ float kf_cluster_reduce(float v, float* scratch, float* xchg, int& parity) {
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  v = """
        + block_reduce
        + r"""<OP>(v, scratch);
  if (threadIdx.x == 0) xchg[parity] = v;
  cluster.sync();
  float t = *cluster.map_shared_rank(&xchg[parity], 0);
  for (unsigned r = 1; r < cluster.num_blocks(); ++r)
    t = kf_combine<OP>(t, *cluster.map_shared_rank(&xchg[parity], r));
  parity ^= 1;
  return t;
}
"""
    )


def grid_reduce(block_reduce: str) -> str:
    """`kf_grid_reduce`, each block's total taken by `block_reduce` (as cluster_reduce's)."""
    return (
        r"""
/* v reduced over the `blocks` blocks that hold a row (launched cooperatively: all run at once). Each
   block's total (the unit's block reduction) goes to its slot of the row's statistic `phase`, then its
   arrival flag (one a block, zeroed before the launch) is raised to the statistic's number; one thread of
   each block waits for every flag of the row and combines the slots in the same fixed order (the same
   total in every block) and hands it to the others past the block reduction's scratch. A statistic has
   slots of its own, so no slot is written again while another block may read it. */
template <int OP>
__device__ float kf_grid_reduce(float v, float* scratch, float* slots, unsigned int* arrivals, int blocks,
                                int rank, int& phase) {
  v = """
        + block_reduce
        + r"""<OP>(v, scratch);
  if (threadIdx.x == 0) {  /* one thread combines the slots in rank order: no shuffles, no atomics */
    slots[phase * blocks + rank] = v;
    __threadfence();  /* the slot before the flag */
    volatile unsigned int* flags = arrivals;
    flags[rank] = (unsigned int)(phase + 1);
    for (int r = 0; r < blocks; ++r)
      while (flags[r] < (unsigned int)(phase + 1)) __nanosleep(64);
    __threadfence();
    const volatile float* row = slots + phase * blocks;
    float t = row[0];
    for (int r = 1; r < blocks; ++r) t = kf_combine<OP>(t, row[r]);
    scratch["""
        + str(CLUSTER_SCRATCH)
        + r"""] = t;
  }
  __syncthreads();
  ++phase;
  return scratch["""
        + str(CLUSTER_SCRATCH)
        + r"""];
}
"""
    )


GRID_PLAN = (
    r"""
/* Grid-held rows (`_grows`): the blocks that hold a row of R elements, at most KF_GRID_SHARE each, spread
   so that the rows in flight (`*rows`) fill the blocks the device runs at once; 0 where a row needs more
   blocks than that (the split kernels then). */
template <class K>
static int kf_grid_rows_plan(K kernel, int64_t R, int64_t outer, int* rows) {
  int dev = 0, sms = 0, fit = 0;
  const int smem = (int)(sizeof(float) * """
    + str(CLUSTER_SMEM_FLOATS)
    + r""");
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) return 0;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) != cudaSuccess)
    return 0;
  const int threads = """
    + str(ONCHIP_THREADS)
    + r""";
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kernel, threads, smem) != cudaSuccess) return 0;
  const int64_t total = (int64_t)sms * fit, need = (R + KF_GRID_SHARE - 1) / KF_GRID_SHARE;
  if (outer <= 0 || need < 1 || need > total) return 0;
  const int64_t n = total / need < outer ? total / need : outer;
  *rows = (int)n;
  return (int)(total / n);
}
"""
)


def held_sweep(lo: str, hi: str, in_registers: list[str], in_shared: list[str]) -> list[str]:
    """A thread's sweep over the elements it holds of [lo, hi): threadIdx.x + 1024 i, the first
    ONCHIP_PT in registers (the `in_registers` lines, `i` the register's index), the rest in shared
    memory (the `in_shared` lines). The lines are taken as indented."""
    start = "threadIdx.x" if lo == "0" else f"{lo} + threadIdx.x"
    k = ["    #pragma unroll", f"    for (int i = 0; i < {ONCHIP_PT}; ++i) {{"]
    k.append(f"      const int64_t j = {start} + (int64_t)i * {ONCHIP_THREADS};")
    k += [f"      if (j < {hi}) {{", *in_registers, "      }", "    }"]
    k.append("    #pragma unroll 4")
    k.append(f"    for (int64_t j = {start} + {ONCHIP_MIN_ROW}; j < {hi}; j += {ONCHIP_THREADS}) {{")
    k += [*in_shared, "    }"]
    return k


class OnChipRows(RowKernels):
    def _onchip_leaf(self, step: Step, leaves: list[Leaf], loads: dict, consumer: Step) -> Leaf | None:
        """The operand both the reduction and its consumer read at the row's element `j`, when it is the
        only one either reads by element (scalars aside); else None."""
        g = self.graph
        full = [leaf for leaf in consumer.prologue_leaves(g) if leaf.name != step.out]
        full = [leaf for leaf in full if not self._is_scalar(leaf)]
        mine = [leaf for leaf in leaves if not self._is_scalar(leaf)]
        if len(full) != 1 or len(mine) != 1 or full[0].name != mine[0].name:
            return None
        if loads[mine[0]] != f"{ptr(mine[0].name)}[base + j]":
            return None  # read through a broadcast map or by position: not the consumer's element
        return mine[0]

    def _fused_rows_onchip(
        self, kname: str, step: Step, src: Ref, leaves: list[Leaf], loads: dict, consumer: Step,
        params: list[str], pre: list[str], init: str, comb: str, code: int, op: str,
    ) -> list[str]:  # fmt: skip
        """`{kname}_fcrows`: the kernel, or [] where it does not apply (`_onchip_leaf`)."""
        g = self.graph
        held = self._onchip_leaf(step, leaves, loads, consumer)
        if held is None:
            return []
        cpre, cloads, _ = self._consumer_loads(step, consumer, lambda _leaf: CACHED)
        rloads = {leaf: CACHED if leaf == held else expr for leaf, expr in loads.items()}
        rbody, rval = emit(g, step, src, lambda leaf: rloads[leaf], indent="        ")
        cbody, cval = emit(g, consumer, Ref(consumer.root.name), lambda leaf: cloads[leaf], indent="        ")
        load = loads[held]
        cout = ptr(consumer.out)
        params_all = params + self._consumer_params(step, consumer)

        def over_row(in_registers: list[str], in_shared: list[str], each: list[str]) -> list[str]:
            """`each` for every element the thread holds, `CACHED` set by the first lines."""
            indent = ["        " + line for line in in_registers]
            return held_sweep("0", "R", indent + each, ["      " + line for line in in_shared] + each)

        k = [f"__global__ void __launch_bounds__({ONCHIP_THREADS}, 1)"]
        k.append(f"    {kname}_fcrows(int64_t outer, int64_t R,")
        k.append("    float* __restrict__ out" + "".join(", " + p for p in params_all) + ") {")
        k.append(f"  extern __shared__ float kf_row[];  /* the row's elements {ONCHIP_MIN_ROW} on */")
        k.append(f"  __shared__ float kf_scratch[{ONCHIP_THREADS} + 33];")
        k += pre + cpre
        k.append("  for (int64_t o = blockIdx.x; o < outer; o += gridDim.x) {")
        k.append("    const int64_t base = o * R;")
        k.append(f"    float kf_v[{ONCHIP_PT}];  /* the row's elements threadIdx.x + 1024 i */")
        k.append(f"    float acc = {init};")
        shared = f"kf_row[j - {ONCHIP_MIN_ROW}]"
        k += over_row(
            [f"kf_v[i] = {load};", f"const float {CACHED} = kf_v[i];"],
            [f"const float {CACHED} = {load};", f"{shared} = {CACHED};"],
            [*rbody, f"        acc = {comb}(acc, {rval});"],
        )
        k.append(f"    acc = {self._reduce_call(code, 'acc')};")
        k.append(f"    const float red = acc{' / (float)R' if op == 'mean' else ''};")
        k.append("    if (threadIdx.x == 0) out[o] = red;")
        k += over_row(
            [f"const float {CACHED} = kf_v[i];"],
            [f"const float {CACHED} = {shared};"],
            [*cbody, f"        {cout}[base + j] = {cval};"],
        )
        k += ["  }", "}"]
        return k

    def _row_kernel_cluster(
        self, kname: str, signature: str, pre: list[str], xb: list[str], xv: str, value: str,
        epilogue: list[str], result: str, op: str,
    ) -> str:  # fmt: skip
        """`{kname}_crows`: a row op over rows of up to CLUSTER_MOST * CLUSTER_SHARE elements, a row a
        cluster (its size a launch attribute), one read and one write of DRAM."""
        return self._row_kernel_held(kname, signature, pre, xb, xv, value, epilogue, result, op, grid=False)

    def _row_kernel_grid(
        self, kname: str, signature: str, pre: list[str], xb: list[str], xv: str, value: str,
        epilogue: list[str], result: str, op: str,
    ) -> str:  # fmt: skip
        """`{kname}_grows`: a row op over rows longer than a cluster holds, a row by `kf_blocks`
        co-resident blocks of a cooperative launch (grid_signature), one read and one write of DRAM."""
        return self._row_kernel_held(
            kname, grid_signature(signature), pre, xb, xv, value, epilogue, result, op, grid=True
        )

    def _row_kernel_held(
        self, kname: str, signature: str, pre: list[str], xb: list[str], xv: str, value: str,
        epilogue: list[str], result: str, op: str, grid: bool,
    ) -> str:  # fmt: skip
        held = f"kf_row[j - lo - {ONCHIP_MIN_ROW}]"

        def sweep(stmt: str) -> list[str]:
            in_registers = ["        const float xv = xr[i];", f"        {stmt.replace(SLOT, 'xr[i]')}"]
            in_shared = [f"      const float xv = {held};", f"      {stmt.replace(SLOT, held)}"]
            return held_sweep("lo", "hi", in_registers, in_shared)

        suffix, by = ("grows", "grid") if grid else ("crows", "cluster")
        k = [f"__global__ void __launch_bounds__({ONCHIP_THREADS}, 1) {kname}_{suffix}{signature} {{"]
        k.append("  extern __shared__ __align__(16) float kf_dyn[];  /* no static shared: one per block */")
        k.append("  float* const kf_scratch = kf_dyn;")
        if not grid:
            k.append(f"  float* const kf_xchg = kf_dyn + {CLUSTER_XCHG};")
        k.append(f"  float* const kf_row = kf_dyn + {CLUSTER_HEAD};  /* the share past the registers */")
        if grid:
            k.append("  const int kf_rank = (int)(blockIdx.x % (unsigned int)kf_blocks);")
        else:
            k.append("  int kf_parity = 0;")
            k.append("  const cooperative_groups::cluster_group kf_cluster =")
            k.append("      cooperative_groups::this_cluster();")
            k.append("  const int64_t kf_blocks = (int64_t)kf_cluster.num_blocks();")
            k.append("  const int64_t kf_rank = (int64_t)kf_cluster.block_rank();")
        k += pre
        k.append("  for (int64_t o = blockIdx.x / kf_blocks; o < outer; o += gridDim.x / kf_blocks) {")
        k.append("    const int64_t base = o * R;")
        if grid:
            k.append(f"    float* const kf_row_slots = kf_slots + o * {GRID_PHASES} * kf_blocks;")
            k.append("    unsigned int* const kf_row_arrivals = kf_arrivals + o * kf_blocks;")
            k.append("    int kf_phase = 0;")
        k.append("    const int64_t per = (R + kf_blocks - 1) / kf_blocks, lo = kf_rank * per;")
        k.append("    const int64_t hi = lo + per < R ? lo + per : R;")
        k.append(f"    float xr[{ONCHIP_PT}];")
        k += held_sweep("lo", "hi", [*xb, f"        xr[i] = {xv};"], [*xb, f"        {held} = {xv};"])
        self._held_by = by
        try:
            stats = self._stats(op, literal(float(self._eps)), sweep, False, slot=SLOT)
        finally:
            self._held_by = ""
        if sum(line.count("kf_grid_reduce<") for line in stats) > GRID_PHASES:
            raise ValueError(f"{op}: more statistics than the grid rows' {GRID_PHASES} slots a block")
        k += stats
        if op == "softmax":
            value = "xv * inv"  # the held elements are exp(x - m) now
        k += sweep(
            "const float y = " + value + ";\n" + "\n".join(epilogue) + f"\n        out[base + j] = {result};"
        )
        k.append("  }")
        if not grid:
            k.append("  kf_cluster.sync();  /* no block leaves while another may still read its slots */")
        k.append("}")
        return "\n".join(k)


def grid_signature(signature: str) -> str:
    """A row kernel's parameters (`(..., last)`) and the grid-held kernel's own: the blocks a row, the
    rows' statistic slots and arrival flags (one a block)."""
    return signature[:-1] + ", int kf_blocks, float* kf_slots, unsigned int* kf_arrivals)"
