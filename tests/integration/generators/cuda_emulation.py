"""Run a generated CUDA unit on the CPU: a check of its kernels' index arithmetic, barriers, warp
shuffles and tie-breaking where there is no GPU (nothing about speed or the GPU's memory model).

The unit's `name<<<grid, block, smem, stream>>>(args)` launches become calls of `emu_launch`, and a
small `cuda_runtime.h` stands in for CUDA's: each block's threads are OS threads that run the kernel
body one block after another, `__syncthreads` is a barrier of the block's threads, `__shared__`
variables are statics (one block runs at a time) and the dynamic `extern __shared__` array a buffer of
the launch's size (a block's own). `cudaLaunchKernelEx` with a cluster dimension runs a cluster's blocks
at once, each with its own threads, barriers and dynamic array; `cooperative_groups::this_cluster()`
gives the cluster's barrier and `map_shared_rank` (into another block's dynamic array: a cluster
kernel keeps its shared data there, its statics being one for all the cluster's blocks here), warp
shuffles exchange values through per-warp slots between two barriers of the
warp, `__ldg` of a float4 and every access through a pointer cast to float4 / float2 check their
alignment. The inline PTX the GEMM and conv families issue
is rewritten into calls of its emulation (`emulate_ptx`): `cvt.rna.tf32.f32` rounds to TF32 (nearest,
ties away from zero), `mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32` exchanges the warp's
fragments through per-warp slots and each lane sums its four outputs from the PTX ISA's fragment
layout, `ldmatrix.sync.aligned.m8n8.x4` hands each lane its four words through per-warp slots
(its rows checked to be 16-byte aligned), `cp.async` copies at once (zeros past its source size;
16-byte copies check both addresses' alignment) and its groups' commit and wait are no-ops; any other
PTX fails the build, named. The unit is then built by g++ (C++20) into a shared library that
`native.Unit` calls with CPU tensors.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from native import fresh_path

from kernelfoundry.abi import include_dir

RUNTIME_H = r"""
#pragma once
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __constant__ static const
#define __align__(n) __attribute__((aligned(n)))
struct dim3 {
  unsigned x, y, z;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint3 { unsigned x, y, z; };
inline thread_local uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
struct float4 { float x, y, z, w; };
inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }
struct float2 { float x, y; };
struct int4 { int x, y, z, w; };
inline float2 make_float2(float a, float b) { return {a, b}; }
struct alignas(4) uchar4 { unsigned char x, y, z, w; };
template <class T> inline T __ldg(const T* p) { return *p; }
inline float4 __ldg(const float4* p) {
  assert(((uintptr_t)p) % 16 == 0 && "misaligned float4 load");
  return *p;
}
template <class T> inline void __stcs(T* p, T v) { *p = v; }
typedef void* cudaStream_t;
typedef int cudaError_t;
enum { cudaSuccess = 0 };
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline cudaError_t cudaMemsetAsync(void* p, int v, size_t n, cudaStream_t) { memset(p, v, n); return 0; }
/* the stream-ordered pool of the graph units' intermediates: plain host memory */
typedef void* cudaMemPool_t;
enum { cudaMemAllocationTypePinned = 1, cudaMemLocationTypeDevice = 1, cudaMemPoolAttrReleaseThreshold = 4 };
struct cudaMemLocation { int type, id; };
struct cudaMemPoolProps { int allocType; cudaMemLocation location; };
inline cudaError_t cudaGetDevice(int* d) { *d = 0; return 0; }
/* a few SMs, so that the units' split-K and wave arithmetic take their many-blocks branches */
enum { cudaDevAttrMultiProcessorCount = 16, cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
typedef int cudaDeviceAttr;
typedef int cudaFuncAttribute;
inline cudaError_t cudaDeviceGetAttribute(int* v, int attr, int) {
  *v = attr == cudaDevAttrMultiProcessorCount ? 4 : 0;
  return 0;
}
template <class F> inline cudaError_t cudaFuncSetAttribute(F, int, int) { return 0; }
inline cudaError_t cudaMemPoolCreate(cudaMemPool_t* p, const cudaMemPoolProps*) { *p = (void*)1; return 0; }
inline cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, int, void*) { return 0; }
inline cudaError_t cudaMallocFromPoolAsync(void** p, size_t n, cudaMemPool_t, cudaStream_t) {
  *p = malloc(n > 0 ? n : 1);
  return *p ? 0 : 2;
}
inline cudaError_t cudaFreeAsync(void* p, cudaStream_t) { free(p); return 0; }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline float __expf(float x) { return expf(x); }
inline float __logf(float x) { return logf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
template <class A, class B> inline auto min(A a, B b) -> decltype(a + b) { return a < b ? a : b; }
template <class A, class B> inline auto max(A a, B b) -> decltype(a + b) { return a > b ? a : b; }
/* a thread's block: its barrier, its warps' barriers, its rank in its cluster (0 outside clusters) */
struct emu_block {
  std::barrier<> bar;
  std::vector<std::unique_ptr<std::barrier<>>> warps;
  unsigned char* smem;  /* the dynamic shared array */
  explicit emu_block(int n) : bar(n), smem(nullptr) {
    for (int w = 0; w < (n + 31) / 32; ++w) warps.emplace_back(new std::barrier<>(std::min(32, n - 32 * w)));
  }
};
inline thread_local emu_block* emu_me;
inline thread_local int emu_rank;
enum { EMU_MAX_CLUSTER = 8 };
inline uint64_t emu_slots[EMU_MAX_CLUSTER * 1024];
inline int emu_tid() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
inline int emu_slot() { return emu_rank * 1024 + emu_tid(); }  /* per thread of every block at once */
inline void __syncthreads() { emu_me->bar.arrive_and_wait(); }
template <class T> inline T emu_shfl(T v, int src_lane) {
  const int t = emu_slot(), w = emu_tid() / 32;
  memcpy(&emu_slots[t], &v, sizeof(T));
  emu_me->warps[w]->arrive_and_wait();
  T r;
  memcpy(&r, &emu_slots[t - (t & 31) + src_lane], sizeof(T));
  emu_me->warps[w]->arrive_and_wait();
  return r;
}
template <class T> inline T __shfl_xor_sync(unsigned, T v, int o) {
  return emu_shfl(v, (emu_tid() & 31) ^ o);
}
template <class T> inline T __shfl_up_sync(unsigned, T v, int d) {
  const int lane = emu_tid() & 31;
  return emu_shfl(v, lane >= d ? lane - d : lane);
}
template <class T> inline T __shfl_down_sync(unsigned, T v, int d) {
  const int lane = emu_tid() & 31;
  return emu_shfl(v, lane + d < 32 ? lane + d : lane);
}
/* inline PTX (emulate_ptx rewrites each statement into one of these) */
inline uint32_t emu_cvt_rna_tf32(float x) {  /* TF32: 10 mantissa bits, nearest, ties away from zero */
  uint32_t u;
  memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) != 0x7f800000u) u += 0x1000u;  /* not inf / nan: half of the dropped ulp */
  return u & 0xffffe000u;
}
inline uint32_t emu_frag[EMU_MAX_CLUSTER * 1024][6];
inline float emu_tf32(uint32_t u) { return __uint_as_float(u & 0xffffe000u); }
/* d = a (16 x 8, row) * b (8 x 8, col) + c over the warp: lane = 4 g + t holds a (g, t), (g + 8, t),
   (g, t + 4), (g + 8, t + 4); b (t, g), (t + 4, g); c (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1) */
inline void emu_mma_m16n8k8_tf32(float& c0, float& c1, float& c2, float& c3, uint32_t a0, uint32_t a1,
                                 uint32_t a2, uint32_t a3, uint32_t b0, uint32_t b1) {
  const int t = emu_slot(), w = emu_tid() / 32, lane = t & 31, base = t - lane, g = lane >> 2, q = lane & 3;
  const uint32_t mine[6] = {a0, a1, a2, a3, b0, b1};
  memcpy(emu_frag[t], mine, sizeof mine);
  emu_me->warps[w]->arrive_and_wait();
  auto A = [&](int r, int k) {
    return emu_tf32(emu_frag[base + (r & 7) * 4 + (k & 3)][(r >= 8) + 2 * (k >= 4)]);
  };
  auto B = [&](int k, int n) { return emu_tf32(emu_frag[base + n * 4 + (k & 3)][4 + (k >= 4)]); };
  float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
  for (int k = 0; k < 8; ++k) {
    s0 += A(g, k) * B(k, 2 * q);
    s1 += A(g, k) * B(k, 2 * q + 1);
    s2 += A(g + 8, k) * B(k, 2 * q);
    s3 += A(g + 8, k) * B(k, 2 * q + 1);
  }
  emu_me->warps[w]->arrive_and_wait();
  c0 += s0;
  c1 += s1;
  c2 += s2;
  c3 += s3;
}
/* a shared address is a handle to the pointer it came from (the unit keeps it 32 bits wide) */
inline thread_local void* emu_shared_at[64];
inline thread_local unsigned emu_shared_next;
inline unsigned __cvta_generic_to_shared(const void* p) {
  const unsigned h = emu_shared_next++ & 63;
  emu_shared_at[h] = const_cast<void*>(p);
  return h;
}
inline void emu_cp_async(unsigned dst, const void* src, int size, int src_size) {
  unsigned char* d = static_cast<unsigned char*>(emu_shared_at[dst & 63]);
  assert(((uintptr_t)d) % size == 0 && "misaligned cp.async destination");
  assert((src_size == 0 || ((uintptr_t)src) % size == 0) && "misaligned cp.async source");
  assert(src_size >= 0 && src_size <= size);
  if (src_size > 0) memcpy(d, src, src_size);
  memset(d + src_size, 0, size - src_size);
}
/* ldmatrix .x4 over the warp: lanes 8 i .. 8 i + 7 give matrix i's rows (16 bytes each), lane 4 g + t
   receives the 4 bytes t of row g of matrix i in its i-th register */
inline const unsigned char* emu_rows[EMU_MAX_CLUSTER * 1024];
inline void emu_ldmatrix_x4(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, unsigned addr) {
  const int t = emu_slot(), w = emu_tid() / 32, lane = t & 31, base = t - lane;
  const unsigned char* row = static_cast<const unsigned char*>(emu_shared_at[addr & 63]);
  assert(((uintptr_t)row) % 16 == 0 && "misaligned ldmatrix row");
  emu_rows[t] = row;
  emu_me->warps[w]->arrive_and_wait();
  uint32_t* r[4] = {&r0, &r1, &r2, &r3};
  for (int i = 0; i < 4; ++i) memcpy(r[i], emu_rows[base + 8 * i + lane / 4] + 4 * (lane % 4), 4);
  emu_me->warps[w]->arrive_and_wait();
}
/* a float4 / float2 access through a cast pointer: the GPU faults where it is not aligned to its size */
template <class T, class P> inline T* emu_vec_ptr(P p) {
  assert(((uintptr_t)p) % sizeof(T) == 0 && "misaligned vector access");
  return reinterpret_cast<T*>(p);
}
inline thread_local unsigned char* emu_dynamic_smem;
inline thread_local std::barrier<>* emu_cluster_bar;
inline thread_local unsigned char* const* emu_cluster_smem;
inline thread_local int emu_cluster_size = 1;
inline thread_local size_t emu_smem_size;
/* `cluster` blocks of the grid (consecutive in x) run at once, each its own threads, barriers and
   dynamic shared array, with a barrier across them; clusters (and blocks, at 1) run one after another */
inline void emu_launch(dim3 g, dim3 b, size_t smem, int cluster, const std::function<void()>& fn) {
  assert(cluster >= 1 && cluster <= EMU_MAX_CLUSTER && g.x % cluster == 0 && "a grid of whole clusters");
  assert(b.x * b.y * b.z <= 1024);
  gridDim = g;
  blockDim = b;
  const int n = b.x * b.y * b.z;
  std::vector<std::unique_ptr<emu_block>> blocks_of;
  std::vector<std::vector<unsigned char>> buffers(cluster);
  std::vector<unsigned char*> bases(cluster);
  for (int r = 0; r < cluster; ++r) {
    blocks_of.emplace_back(new emu_block(n));
    buffers[r].resize(smem + 16);  /* over-aligned by hand: the unit's __align__(16) */
    bases[r] = buffers[r].data() + (16 - ((uintptr_t)buffers[r].data()) % 16) % 16;
    blocks_of[r]->smem = bases[r];
  }
  std::barrier<> cluster_bar(n * cluster);
  const long clusters = (long)g.x / cluster * g.y * g.z;
  std::vector<std::thread> threads;
  for (int r = 0; r < cluster; ++r)
    for (int t = 0; t < n; ++t)
      threads.emplace_back([&, r, t] {
        emu_me = blocks_of[r].get();
        emu_rank = r;
        emu_dynamic_smem = smem ? bases[r] : nullptr;
        emu_smem_size = smem;
        emu_cluster_bar = &cluster_bar;
        emu_cluster_smem = bases.data();
        emu_cluster_size = cluster;
        threadIdx = {(unsigned)(t % b.x), (unsigned)((t / b.x) % b.y), (unsigned)(t / (b.x * b.y))};
        const long gx = g.x / cluster;
        for (long k = 0; k < clusters; ++k) {
          blockIdx = {(unsigned)((k % gx) * cluster + r), (unsigned)((k / gx) % g.y),
                      (unsigned)(k / (gx * g.y))};
          fn();
          cluster_bar.arrive_and_wait();
        }
      });
  for (auto& t : threads) t.join();
}
inline void emu_launch(dim3 g, dim3 b, const std::function<void()>& fn) { emu_launch(g, b, 0, 1, fn); }
inline void emu_launch(dim3 g, dim3 b, size_t smem, const std::function<void()>& fn) {
  emu_launch(g, b, smem, 1, fn);
}
/* thread block clusters: cudaLaunchKernelEx with a cluster dimension, and cooperative_groups' cluster */
enum { cudaLaunchAttributeClusterDimension = 4 };
struct cudaLaunchAttribute {
  int id;
  struct { struct { unsigned x, y, z; } clusterDim; } val;
};
struct cudaLaunchConfig_t {
  dim3 gridDim, blockDim;
  size_t dynamicSmemBytes;
  cudaStream_t stream;
  cudaLaunchAttribute* attrs;
  unsigned numAttrs;
};
template <class... P, class... A>
inline cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t* config, void (*kernel)(P...), A... args) {
  int cluster = 1;
  for (unsigned i = 0; i < config->numAttrs; ++i)
    if (config->attrs[i].id == cudaLaunchAttributeClusterDimension) {
      assert(config->attrs[i].val.clusterDim.y == 1 && config->attrs[i].val.clusterDim.z == 1);
      cluster = (int)config->attrs[i].val.clusterDim.x;
    }
  emu_launch(config->gridDim, config->blockDim, config->dynamicSmemBytes, cluster, [&] { kernel(args...); });
  return 0;
}
namespace cooperative_groups {
struct cluster_group {
  void sync() const { emu_cluster_bar->arrive_and_wait(); }
  unsigned block_rank() const { return (unsigned)emu_rank; }
  unsigned num_blocks() const { return (unsigned)emu_cluster_size; }
  /* the same place of block r's dynamic shared array (the only shared memory a cluster kernel maps) */
  template <class T> T* map_shared_rank(T* p, unsigned r) const {
    const ptrdiff_t at = reinterpret_cast<unsigned char*>(p) - emu_dynamic_smem;
    assert(emu_dynamic_smem && at >= 0 && (size_t)at < emu_smem_size && "mapped outside the dynamic array");
    assert((int)r < emu_cluster_size);
    return reinterpret_cast<T*>(emu_cluster_smem[r] + at);
  }
};
inline cluster_group this_cluster() { return {}; }
}  // namespace cooperative_groups
"""


def _split_top(text: str) -> list[str]:
    """`text` split at the commas outside brackets."""
    parts, depth, current = [], 0, ""
    for ch in text:
        depth += ch in "([{"
        depth -= ch in ")]}"
        if ch == "," and depth == 0:
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    return [*parts, current.strip()]


def rewrite_launches(source: str) -> str:
    """Every `name<T><<<grid, block, ...>>>(args)` of `source` as `emu_launch(dim3(grid), dim3(block),
    [&] { name<T>(args); })`."""
    out = ""
    while (i := source.find("<<<")) >= 0:
        j = i
        if source[j - 1] == ">":  # template arguments: back to their opening bracket
            depth = 0
            while True:
                j -= 1
                depth += source[j] == ">"
                depth -= source[j] == "<"
                if depth == 0:
                    break
        while j > 0 and (source[j - 1].isalnum() or source[j - 1] == "_"):
            j -= 1
        k = source.index(">>>", i)
        config = _split_top(source[i + 3 : k])
        if source[k + 3] != "(":
            raise ValueError(f"launch without arguments: {source[j : k + 3]}")
        depth, m = 0, k + 3
        while True:
            depth += source[m] == "("
            depth -= source[m] == ")"
            if depth == 0:
                break
            m += 1
        call = f"{source[j:i]}({source[k + 4 : m]})"
        smem = f", (size_t)({config[2]})" if len(config) > 2 and config[2] != "0" else ""
        out += source[:j] + f"emu_launch(dim3({config[0]}), dim3({config[1]}){smem}, [&] {{ {call}; }})"
        source = source[m + 1 :]
    return out + source


_ASM = re.compile(r"\basm(?:\s+volatile)?\s*\(")
_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')
_OPERAND = re.compile(r'^"[^"]*"\s*\((.*)\)$', re.S)  # "constraint"(expression)
_CP_ASYNC = re.compile(r"cp\.async\.c[ag]\.shared\.global \[%0\], \[%1\], (\d+), %2;")
_DYNAMIC_SHARED = re.compile(r"extern __shared__ (?:__align__\(\d+\) )?float (\w+)\[\];")
_VECTOR_CAST = re.compile(r"reinterpret_cast<((?:const )?float[24])\s*\*>\(")


def _operands(section: str) -> list[str]:
    """The expressions of an asm operand list (`"=r"(big), "f"(x)`)."""
    if not section.strip():
        return []
    found = []
    for part in _split_top(section):
        match = _OPERAND.match(part.strip())
        if match is None:
            raise ValueError(f"unreadable asm operand: {part!r}")
        found.append(match.group(1))
    return found


def _emulated(template: str, outputs: list[str], inputs: list[str]) -> str:
    """The C++ statement that does what the PTX `template` does to its operands."""
    if template.startswith("cvt.rna.tf32.f32 "):
        return f"{outputs[0]} = emu_cvt_rna_tf32({inputs[0]});"
    if template.startswith("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "):
        return f"emu_mma_m16n8k8_tf32({', '.join(outputs + inputs)});"
    if template == "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];":
        return f"emu_ldmatrix_x4({', '.join(outputs + inputs)});"
    if (copy := _CP_ASYNC.fullmatch(template)) is not None:
        dst, src, src_size = inputs
        return f"emu_cp_async({dst}, {src}, {copy.group(1)}, {src_size});"
    if template in ("cp.async.commit_group;", "cp.async.wait_group %0;", "cp.async.wait_all;"):
        return "(void)0;"  # every copy landed when it was issued
    raise ValueError(f"no emulation for inline PTX: {template!r}")


def _asm_parts(body: str) -> list[str]:
    """An asm statement's parts (template, outputs, inputs, ...): split at the colons outside strings
    and brackets."""
    parts, depth, current, quoted = [], 0, "", False
    for i, ch in enumerate(body):
        if ch == '"' and (i == 0 or body[i - 1] != "\\"):
            quoted = not quoted
        elif not quoted:
            depth += ch in "([{"
            depth -= ch in ")]}"
            if ch == ":" and depth == 0:
                parts.append(current)
                current = ""
                continue
        current += ch
    return [*parts, current]


def emulate_ptx(source: str) -> str:
    """`source` with every inline PTX statement (`asm("..." : outputs : inputs);`) replaced by its
    emulation, the dynamic shared array a pointer to the launch's buffer, and every float4 / float2
    access through a cast pointer checked for its alignment."""
    source = _DYNAMIC_SHARED.sub(r"float* const \1 = reinterpret_cast<float*>(emu_dynamic_smem);", source)
    source = _VECTOR_CAST.sub(r"emu_vec_ptr<\1>(", source)
    out = ""
    while (match := _ASM.search(source)) is not None:
        depth, end, quoted = 1, match.end(), False
        while depth:
            ch = source[end]
            if ch == '"' and source[end - 1] != "\\":
                quoted = not quoted
            elif not quoted:
                depth += ch == "("
                depth -= ch == ")"
            end += 1
        parts = [*_asm_parts(source[match.end() : end - 1]), "", ""]
        template = "".join(m.group(1) for m in _STRING.finditer(parts[0]))
        semicolon = source.index(";", end)
        out += source[: match.start()] + _emulated(template, _operands(parts[1]), _operands(parts[2]))
        source = source[semicolon + 1 :]
    return out + source


def emulation_ready() -> bool:
    """g++ with C++20's <barrier>."""
    if shutil.which("g++") is None:
        return False
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "probe.cpp"
        src.write_text("#include <barrier>\nint main() { std::barrier<> b(1); b.arrive_and_wait(); }\n")
        proc = subprocess.run(
            ["g++", "-std=c++20", str(src), "-o", str(Path(tmp) / "probe")], capture_output=True
        )
        return proc.returncode == 0


def build_emulated(code: str, out_dir: Path, params: dict[str, int] | None = None) -> Path:
    """The unit `code` (CUDA) built for the CPU emulation, its tunables set to `params` (defines, as the
    product's builds set them): the path of its shared library."""
    runtime = out_dir / "emu_include"
    runtime.mkdir(exist_ok=True)
    header = runtime / "cuda_runtime.h"
    if not header.exists() or header.read_text() != RUNTIME_H:
        # builds may run in parallel: never let one read a header another is writing
        staged = fresh_path(".h", runtime)
        staged.write_text(RUNTIME_H)
        os.replace(staged, header)
    groups = runtime / "cooperative_groups.h"
    if not groups.exists():  # cuda_runtime.h holds the emulation of the cluster's group
        staged = fresh_path(".h", runtime)
        staged.write_text("#pragma once\n#include <cuda_runtime.h>\n")
        os.replace(staged, groups)
    src = fresh_path(".cpp", out_dir)
    src.write_text(rewrite_launches(emulate_ptx(code)))
    lib = src.with_suffix(".so")
    # __CUDACC__: the prelude's device helpers (the emulation stands in for what they call)
    # hidden symbols, no unique ones: units loaded side by side in one process each keep their own
    # kernels and `__shared__` statics (two units' `kf_gemm<0>` would otherwise bind to the first loaded)
    cmd = ["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-fvisibility=hidden", "-fno-gnu-unique"]
    cmd += ["-D__CUDACC__", "-Wno-unknown-pragmas", *(f"-D{k}={v}" for k, v in (params or {}).items())]
    cmd += [f"-I{runtime}", f"-I{include_dir()}"]
    proc = subprocess.run([*cmd, str(src), "-o", str(lib), "-lpthread"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"emulation build failed: {proc.stderr[:4000]}")
    return lib


def emulated_output(task: Any, kernel: Any, out_dir: Path) -> tuple[Any, Any]:
    """(the unit's output under the emulation, the reference's) for the task's first shape, on the CPU:
    through the kernel's glue when it has one (its `kf.launch` calls the emulated unit), else its entry
    point called with the inputs, parameters and buffers."""
    import torch
    from native import Unit

    from kernelfoundry.tasks.reference import instantiate

    unit = Unit(build_emulated(kernel.code, out_dir, dict(getattr(kernel, "params", None) or {})))

    class Launcher:
        def launch(self, entry: str, inputs: list[Any], outputs: list[Any]) -> None:
            assert unit.call(entry, inputs, outputs) == 0

    reference = instantiate(task, task.shapes[0], seed=1, device="cpu")
    with torch.no_grad():
        expected = reference.model(*reference.inputs)
        if kernel.glue:
            glue: dict[str, Any] = {"torch": torch, "nn": torch.nn, "F": torch.nn.functional}
            glue["kf"] = Launcher()
            exec(compile(kernel.glue, "<glue>", "exec"), glue)
            candidate = glue["ModelNew"]()
            candidate.load_state_dict(reference.model.state_dict())
            got = candidate(*reference.inputs)
        else:
            state = [*reference.model.parameters(), *reference.model.buffers()]
            got = torch.full_like(expected, float("nan"))  # what the unit leaves unwritten fails
            assert unit.call(kernel.entry_point, [*reference.inputs, *state], [got]) == 0
    return got, expected
