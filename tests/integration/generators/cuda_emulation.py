"""Run a generated CUDA unit on the CPU: a check of its kernels' index arithmetic, barriers, warp
shuffles and tie-breaking where there is no GPU (nothing about speed or the GPU's memory model).

The unit's `name<<<grid, block, smem, stream>>>(args)` launches become calls of `emu_launch`, and a
small `cuda_runtime.h` stands in for CUDA's: each block's threads are OS threads that run the kernel
body one block after another, `__syncthreads` is a barrier of the block's threads, `__shared__`
variables are statics (one block runs at a time) and the dynamic `extern __shared__` array a buffer of
the launch's size (a block's own, 1024-byte aligned). `cudaLaunchKernelEx` with a cluster dimension runs
a cluster's blocks at once, each with its own threads, barriers and dynamic array;
a cooperative launch (`cudaLaunchAttributeCooperative`) runs its whole grid so, the blocks that wait
on each other through global memory (atomics and spin loops) all at once;
`cooperative_groups::this_cluster()` gives the cluster's barrier and `map_shared_rank` (into another
block's dynamic array: a cluster kernel keeps its shared data there, its statics being one for all the
cluster's blocks here), warp shuffles exchange values through per-warp slots between two barriers of the
warp, `__ldg` of a float4 and every access through a pointer cast to float4 / float2 check their
alignment. `__cvta_generic_to_shared` of a pointer into the block's dynamic array gives its byte offset
there (the array at shared address 0, so that the unit's arithmetic on it, wgmma's descriptors and the
swizzle's address bits work as on the GPU), of any other pointer a handle that carries no arithmetic;
every emulation that takes a shared address reads both. The inline PTX the GEMM and conv families issue
is rewritten into calls of its emulation (`emulate_ptx`): `cvt.rna.tf32.f32` rounds to TF32 (nearest,
ties away from zero), `mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32` exchanges the warp's
fragments through per-warp slots and each lane sums its four outputs from the PTX ISA's fragment
layout, `ldmatrix.sync.aligned.m8n8.x4` hands each lane its four words through per-warp slots
(its rows checked to be 16-byte aligned), `cp.async` copies at once (zeros past its source size;
16-byte copies check both addresses' alignment) and its groups' commit and wait are no-ops,
`wgmma.mma_async.sync.aligned.m64nNk8.f32.tf32.tf32` (both operands K-major in the dynamic array under
the 128-byte swizzle, given by their descriptors; accumulators read-write) has each of the warpgroup's
threads sum its own N / 2 registers of D from shared memory when it is issued (the PTX ISA's fragment
layout and swizzled addresses, every read checked to lie in the dynamic array, another swizzle mode or a
base offset refused by an assert), so wgmma's fence, commit and wait and `fence.proxy.async` are no-ops;
any other PTX fails the build, named. The unit is then built by g++ (C++20) into a shared library that
`native.Unit` calls with CPU tensors.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
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
#include <type_traits>
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
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
/* a thread waiting on other blocks (a spin loop's pause) lets the OS run them */
inline void __nanosleep(unsigned) { std::this_thread::yield(); }
/* one block an SM: the launch the unit plans from it runs every block at once (cooperative below) */
template <class F> inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F, int, size_t) {
  *n = 1;
  return 0;
}
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
/* the block's dynamic shared array (the launch's buffer, 1024-byte aligned) and its size */
inline thread_local unsigned char* emu_dynamic_smem;
inline thread_local size_t emu_smem_size;
/* A shared address: a pointer into the block's dynamic array maps to its byte offset there (arithmetic
   on it, descriptors and the swizzle's address bits work as on the GPU, the array starting at shared
   address 0); any other pointer (a static `__shared__` array) to a handle, EMU_SHARED_HANDLE with one of
   64 per-thread slots in bits 12-17, that carries no arithmetic (the unit keeps it 32 bits wide). */
enum : unsigned { EMU_SHARED_HANDLE = 0x80000000u };
inline thread_local void* emu_shared_at[64];
inline thread_local unsigned emu_shared_next;
inline unsigned __cvta_generic_to_shared(const void* p) {
  const uintptr_t at = (uintptr_t)p, base = (uintptr_t)emu_dynamic_smem;
  if (emu_dynamic_smem && at >= base && at - base <= emu_smem_size) return (unsigned)(at - base);
  const unsigned h = emu_shared_next++ & 63;
  emu_shared_at[h] = const_cast<void*>(p);
  return EMU_SHARED_HANDLE | h << 12;
}
/* the `size` bytes at shared address `addr`: in the dynamic array (checked to lie inside it) or a
   static array's handle */
inline unsigned char* emu_shared(unsigned addr, size_t size) {
  if (addr & EMU_SHARED_HANDLE) {
    assert((addr & ~(EMU_SHARED_HANDLE | 63u << 12)) == 0 &&
           "arithmetic on a static __shared__ array's address (only the dynamic array's carries it)");
    return static_cast<unsigned char*>(emu_shared_at[(addr >> 12) & 63]);
  }
  assert(emu_dynamic_smem && addr + size <= emu_smem_size && "shared address outside the dynamic array");
  return emu_dynamic_smem + addr;
}
inline void emu_cp_async(unsigned dst, const void* src, int size, int src_size) {
  unsigned char* d = emu_shared(dst, size);
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
  const unsigned char* row = emu_shared(addr, 16);
  assert(((uintptr_t)row) % 16 == 0 && "misaligned ldmatrix row");
  emu_rows[t] = row;
  emu_me->warps[w]->arrive_and_wait();
  uint32_t* r[4] = {&r0, &r1, &r2, &r3};
  for (int i = 0; i < 4; ++i) memcpy(r[i], emu_rows[base + 8 * i + lane / 4] + 4 * (lane % 4), 4);
  emu_me->warps[w]->arrive_and_wait();
}
/* wgmma's shared-memory descriptor of a K-major operand under the 128-byte swizzle: start address
   (bits 0-13) and stride byte offset (bits 32-45, between 8-row groups) in 16-byte units, the leading
   byte offset (bits 16-29) unused by this layout, base offset (bits 49-51) 0, swizzle mode (bits 62-63)
   1. The start is an offset into the block's dynamic array (the only shared memory wgmma reads here). */
inline void emu_wgmma_check(uint64_t desc) {
  assert((desc >> 62) == 1 && "wgmma descriptor: only the 128-byte swizzle (mode 1) is emulated");
  assert(((desc >> 49) & 7) == 0 && "wgmma descriptor: a nonzero base offset is not emulated");
}
/* element (row, k) of the operand: byte 4 k of row r at start + (r / 8) SBO + (r % 8) 128, the address's
   bits 4-6 XOR its bits 7-9 (the 16-byte chunk q of a row at chunk q ^ (r % 8) where the 8-row groups
   are 1024-byte aligned); TF32: the low 13 mantissa bits ignored */
inline float emu_wgmma_read(uint64_t desc, int row, int k) {
  const size_t start = (desc & 0x3FFF) << 4, sbo = ((desc >> 32) & 0x3FFF) << 4;
  size_t a = start + (row / 8) * sbo + (row % 8) * 128 + 4 * k;
  a ^= ((a >> 7) & 7) << 4;
  assert(emu_dynamic_smem && a + 4 <= emu_smem_size && "wgmma operand outside the dynamic shared array");
  uint32_t u;
  memcpy(&u, emu_dynamic_smem + a, 4);
  return __uint_as_float(u & 0xffffe000u);
}
/* wgmma.mma_async m64nNk8 f32 += tf32 * tf32, both operands K-major in shared memory: D (64 x N) = A
   (64 x 8) * B (N x 8)^T, plus D where scale_d is nonzero. The warpgroup's 128 threads issue it together;
   register r of thread t (warp w = t / 32 % 4, lane l) holds D(16 w + l / 4 + 8 (r / 2 % 2), 8 (r / 4) +
   2 (l % 4) + r % 2), mma.sync m16n8's c0..c3 over N / 8 column tiles. Each thread sums its own registers
   from shared memory at once: nothing passes between the threads, and the copies the unit waited for
   (cp.async lands when issued) are in place, so no barrier. Done when issued: its commit and wait are
   no-ops, as are wgmma.fence and the async proxy's fence. */
template <int N, class... F>
inline void emu_wgmma_m64k8_tf32(uint64_t desc_a, uint64_t desc_b, int scale_d, F&... d) {
  static_assert(N % 8 == 0 && N >= 8 && N <= 256 && sizeof...(F) == N / 2, "m64nNk8: N / 2 registers");
  static_assert((std::is_same_v<F, float> && ...), "f32 accumulators");
  const int t = emu_tid(), lane = t % 32, w = t / 32 % 4;
  assert(t / 128 * 128 + 128 <= (int)(blockDim.x * blockDim.y * blockDim.z) && "wgmma: 4 whole warps");
  emu_wgmma_check(desc_a);
  emu_wgmma_check(desc_b);
  float a[2][8];
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 8; ++k) a[i][k] = emu_wgmma_read(desc_a, 16 * w + lane / 4 + 8 * i, k);
  float* regs[] = {&d...};
  for (int r = 0; r < N / 2; ++r) {
    const int col = 8 * (r / 4) + 2 * (lane % 4) + r % 2;
    float s = 0.0f;
    for (int k = 0; k < 8; ++k) s += a[r / 2 % 2][k] * emu_wgmma_read(desc_b, col, k);
    *regs[r] = scale_d ? *regs[r] + s : s;
  }
}
/* a float4 / float2 access through a cast pointer: the GPU faults where it is not aligned to its size */
template <class T, class P> inline T* emu_vec_ptr(P p) {
  assert(((uintptr_t)p) % sizeof(T) == 0 && "misaligned vector access");
  return reinterpret_cast<T*>(p);
}
inline thread_local std::barrier<>* emu_cluster_bar;
inline thread_local unsigned char* const* emu_cluster_smem;
inline thread_local int emu_cluster_size = 1;
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
    /* 1024-byte aligned by hand: the 128-byte swizzle is a function of the address bits 4-9 */
    buffers[r].resize(smem + 1024);
    bases[r] = buffers[r].data() + (1024 - ((uintptr_t)buffers[r].data()) % 1024) % 1024;
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
/* thread block clusters: cudaLaunchKernelEx with a cluster dimension, and cooperative_groups' cluster;
   a cooperative launch runs its whole grid at once (EMU_MAX_CLUSTER blocks at most) */
enum { cudaLaunchAttributeCooperative = 2, cudaLaunchAttributeClusterDimension = 4 };
struct cudaLaunchAttribute {
  int id;
  struct { struct { unsigned x, y, z; } clusterDim; int cooperative; } val;
};
struct cudaLaunchConfig_t {
  dim3 gridDim, blockDim;
  size_t dynamicSmemBytes;
  cudaStream_t stream;
  cudaLaunchAttribute* attrs;
  unsigned numAttrs;
};
inline int emu_cooperative_count = 0;
/* how many cooperative launches the unit made (a test's proof that a path was taken) */
extern "C" __attribute__((visibility("default"))) int emu_cooperative_launches() {
  return emu_cooperative_count;
}
template <class... P, class... A>
inline cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t* config, void (*kernel)(P...), A... args) {
  int cluster = 1;
  for (unsigned i = 0; i < config->numAttrs; ++i)
    if (config->attrs[i].id == cudaLaunchAttributeClusterDimension) {
      assert(config->attrs[i].val.clusterDim.y == 1 && config->attrs[i].val.clusterDim.z == 1);
      cluster = (int)config->attrs[i].val.clusterDim.x;
    } else if (config->attrs[i].id == cudaLaunchAttributeCooperative && config->attrs[i].val.cooperative) {
      /* co-resident blocks: the whole grid runs at once, as one cluster */
      assert(config->gridDim.y == 1 && config->gridDim.z == 1);
      cluster = (int)config->gridDim.x;
      ++emu_cooperative_count;
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
# m64nNk8 TF32 with both operands' descriptors, its scale-d a predicate set from an operand
_WGMMA = re.compile(
    r"\{\s*\.reg \.pred p;\s*setp\.ne\.b32 p, %(\d+), 0;\s*"
    r"wgmma\.mma_async\.sync\.aligned\.m64n(\d+)k8\.f32\.tf32\.tf32\s+"
    r"\{\s*(%\d+(?:\s*,\s*%\d+)*)\s*\},\s*%(\d+),\s*%(\d+),\s*p,\s*1,\s*1;\s*\}\s*"
)
# what the emulation does at once (cp.async lands and wgmma sums when issued) leaves these nothing to do
_NO_OPS = (
    "cp.async.commit_group;",
    "cp.async.wait_group %0;",
    "cp.async.wait_all;",
    "wgmma.fence.sync.aligned;",
    "wgmma.commit_group.sync.aligned;",
    "wgmma.wait_group.sync.aligned %0;",
    "fence.proxy.async.shared::cta;",
)


def _constraints(section: str) -> list[str]:
    """The constraints of an asm operand list (`"=r"(big), "f"(x)`: `=r`, `f`)."""
    return [part.strip()[1:].split('"')[0] for part in _split_top(section)] if section.strip() else []


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


def _emulated(
    template: str, outputs: list[str], inputs: list[str], output_constraints: list[str] | None = None
) -> str:
    """The C++ statement that does what the PTX `template` does to its operands (the outputs'
    constraints, where given, checked where the PTX reads its outputs)."""
    if template.startswith("cvt.rna.tf32.f32 "):
        return f"{outputs[0]} = emu_cvt_rna_tf32({inputs[0]});"
    if template.startswith("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "):
        return f"emu_mma_m16n8k8_tf32({', '.join(outputs + inputs)});"
    if template == "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];":
        return f"emu_ldmatrix_x4({', '.join(outputs + inputs)});"
    if (copy := _CP_ASYNC.fullmatch(template)) is not None:
        dst, src, src_size = inputs
        return f"emu_cp_async({dst}, {src}, {copy.group(1)}, {src_size});"
    if template.strip() in _NO_OPS:
        return "(void)0;"
    if (mma := _WGMMA.fullmatch(template)) is not None:
        if output_constraints is not None and any(c != "+f" for c in output_constraints):
            raise ValueError(f"wgmma's accumulators must be read-write floats (+f): {output_constraints}")
        return _emulated_wgmma(mma, outputs, inputs)
    raise ValueError(f"no emulation for inline PTX: {template!r}")


def _emulated_wgmma(mma: re.Match[str], outputs: list[str], inputs: list[str]) -> str:
    """The call of `emu_wgmma_m64k8_tf32` for a wgmma whose template `mma` matched: its N / 2
    accumulators the outputs %0 .. %N/2-1 in order, then the descriptors of A and B and scale-d."""
    n = int(mma.group(2))
    half = n // 2
    registers = [r.strip() for r in mma.group(3).split(",")]
    expected = (str(half + 2), [f"%{r}" for r in range(half)], str(half), str(half + 1))
    if (
        n % 8
        or not 8 <= n <= 256
        or (mma.group(1), registers, mma.group(4), mma.group(5)) != expected
        or len(outputs) != half
        or len(inputs) != 3
    ):
        raise ValueError(f"no emulation for this wgmma's operands: {mma.group(0)!r}")
    desc_a, desc_b, scale_d = inputs
    return f"emu_wgmma_m64k8_tf32<{n}>({', '.join([desc_a, desc_b, scale_d, *outputs])});"


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
        template = template.replace("\\n", "\n").replace("\\t", "\t")  # the literals' escapes
        semicolon = source.index(";", end)
        outputs, inputs = _operands(parts[1]), _operands(parts[2])
        out += source[: match.start()] + _emulated(template, outputs, inputs, _constraints(parts[1]))
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


# Tests build and run units in threads side by side; the reference's weights and inputs are drawn from
# torch's global generator (seeded per draw), so two draws at once could interleave and hand the two
# calls different inputs (found by a test that compares two units' outputs with each other)
_DRAWS = threading.Lock()


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

    with _DRAWS:  # the draws seed torch's global generator: one thread's at a time, or they interleave
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
