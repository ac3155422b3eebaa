"""Run a generated CUDA unit on the CPU: a check of its kernels' index arithmetic, barriers, warp
shuffles and tie-breaking where there is no GPU (nothing about speed or the GPU's memory model).

The unit's `name<<<grid, block, smem, stream>>>(args)` launches become calls of `emu_launch`, and a
small `cuda_runtime.h` stands in for CUDA's: each block's threads are OS threads that run the kernel
body one block after another, `__syncthreads` is a barrier of the block's threads, `__shared__`
variables are statics (one block runs at a time), warp shuffles exchange values through per-warp
slots between two barriers of the warp, `__ldg` of a float4 checks its 16-byte alignment. The unit is
then built by g++ (C++20) into a shared library that `native.Unit` calls with CPU tensors.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

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
inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
template <class A, class B> inline auto min(A a, B b) -> decltype(a + b) { return a < b ? a : b; }
template <class A, class B> inline auto max(A a, B b) -> decltype(a + b) { return a > b ? a : b; }
inline std::barrier<>* emu_block_bar;
inline std::vector<std::unique_ptr<std::barrier<>>> emu_warp_bar;
inline uint64_t emu_slots[1024];
inline int emu_tid() { return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z); }
inline void __syncthreads() { emu_block_bar->arrive_and_wait(); }
template <class T> inline T emu_shfl(T v, int src_lane) {
  const int t = emu_tid(), w = t / 32;
  memcpy(&emu_slots[t], &v, sizeof(T));
  emu_warp_bar[w]->arrive_and_wait();
  T r;
  memcpy(&r, &emu_slots[w * 32 + src_lane], sizeof(T));
  emu_warp_bar[w]->arrive_and_wait();
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
inline void emu_launch(dim3 g, dim3 b, const std::function<void()>& fn) {
  gridDim = g;
  blockDim = b;
  const int n = b.x * b.y * b.z;
  std::barrier<> block_bar(n);
  emu_block_bar = &block_bar;
  emu_warp_bar.clear();
  for (int w = 0; w < (n + 31) / 32; ++w)
    emu_warp_bar.emplace_back(new std::barrier<>(std::min(32, n - 32 * w)));
  const long blocks = (long)g.x * g.y * g.z;
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t)
    threads.emplace_back([&, t] {
      threadIdx = {(unsigned)(t % b.x), (unsigned)((t / b.x) % b.y), (unsigned)(t / (b.x * b.y))};
      for (long k = 0; k < blocks; ++k) {
        blockIdx = {(unsigned)(k % g.x), (unsigned)((k / g.x) % g.y), (unsigned)(k / ((long)g.x * g.y))};
        fn();
        block_bar.arrive_and_wait();
      }
    });
  for (auto& t : threads) t.join();
}
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
        out += source[:j] + f"emu_launch(dim3({config[0]}), dim3({config[1]}), [&] {{ {call}; }})"
        source = source[m + 1 :]
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


def build_emulated(code: str, out_dir: Path) -> Path:
    """The unit `code` (CUDA) built for the CPU emulation: the path of its shared library."""
    runtime = out_dir / "emu_include"
    runtime.mkdir(exist_ok=True)
    header = runtime / "cuda_runtime.h"
    if not header.exists() or header.read_text() != RUNTIME_H:
        # builds may run in parallel: never let one read a header another is writing
        staged = Path(tempfile.mkstemp(suffix=".h", dir=runtime)[1])
        staged.write_text(RUNTIME_H)
        os.replace(staged, header)
    src = Path(tempfile.mkstemp(suffix=".cpp", dir=out_dir)[1])
    src.write_text(rewrite_launches(code))
    lib = src.with_suffix(".so")
    # __CUDACC__: the prelude's device helpers (the emulation stands in for what they call)
    cmd = ["g++", "-std=c++20", "-O1", "-shared", "-fPIC", "-D__CUDACC__", "-Wno-unknown-pragmas"]
    cmd += [f"-I{runtime}", f"-I{include_dir()}"]
    proc = subprocess.run([*cmd, str(src), "-o", str(lib), "-lpthread"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"emulation build failed: {proc.stderr[:4000]}")
    return lib
