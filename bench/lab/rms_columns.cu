// Kernel lab: RMS norm over dim 1 of (O=16, R=64, I=65536), variants timed side by side (bench/lab/README.md).
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("err %s line %d\n", cudaGetErrorString(e), __LINE__); exit(1);} } while (0)

// V0: current generated shape: 8 row groups x 32 float4 lanes; pass 2 re-reads x.
template <bool STREAM>
__global__ void __launch_bounds__(256) v0(int64_t outer, int64_t R, int64_t inner, const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float4 part4[8][32];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int64_t q = inner / 4, tiles = (q + 31) / 32;
  for (int64_t b = blockIdx.x; b < outer * tiles; b += gridDim.x) {
    const int64_t o = b / tiles, i4 = (b % tiles) * 32 + tx;
    float4 acc = make_float4(0, 0, 0, 0);
    if (i4 < q) {
      #pragma unroll 8
      for (int64_t j = ty; j < R; j += 8) {
        const float4 w = reinterpret_cast<const float4*>(x + (o * R + j) * inner)[i4];
        acc.x += w.x * w.x; acc.y += w.y * w.y; acc.z += w.z * w.z; acc.w += w.w * w.w;
      }
    }
    part4[ty][tx] = acc;
    __syncthreads();
    if (ty == 0) {
      float4 r = part4[0][tx];
      for (int k = 1; k < 8; ++k) { r.x += part4[k][tx].x; r.y += part4[k][tx].y; r.z += part4[k][tx].z; r.w += part4[k][tx].w; }
      part4[0][tx] = r;
    }
    __syncthreads();
    const float4 r = part4[0][tx];
    const float sx = 1.0f / sqrtf(r.x / R + 1e-5f), sy = 1.0f / sqrtf(r.y / R + 1e-5f), sz = 1.0f / sqrtf(r.z / R + 1e-5f), sw = 1.0f / sqrtf(r.w / R + 1e-5f);
    if (i4 < q) {
      #pragma unroll 8
      for (int64_t j = ty; j < R; j += 8) {
        const float4 w = reinterpret_cast<const float4*>(x + (o * R + j) * inner)[i4];
        float4 res = make_float4(w.x * sx, w.y * sy, w.z * sz, w.w * sw);
        float4* p = reinterpret_cast<float4*>(y + (o * R + j) * inner) + i4;
        if (STREAM) __stcs(p, res); else *p = res;
      }
    }
    __syncthreads();
  }
}

// Registers: G row groups x 32 lanes (float4); each thread keeps V rows. R <= G*V.
template <int G, int V, bool STREAM>
__global__ void __launch_bounds__(G * 32) vreg(int64_t outer, int64_t R, int64_t inner, const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float4 part4[G][32];
  const int tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
  const int64_t q = inner / 4, tiles = (q + 31) / 32;
  for (int64_t b = blockIdx.x; b < outer * tiles; b += gridDim.x) {
    const int64_t o = b / tiles, i4 = (b % tiles) * 32 + tx;
    float4 c[V];
    float4 acc = make_float4(0, 0, 0, 0);
    #pragma unroll
    for (int v = 0; v < V; ++v) {
      const int64_t j = ty + G * v;
      if (i4 < q && j < R) {
        const float4* p = reinterpret_cast<const float4*>(x + (o * R + j) * inner) + i4;
        c[v] = STREAM ? __ldcs(p) : *p;
      } else c[v] = make_float4(0, 0, 0, 0);
    }
    #pragma unroll
    for (int v = 0; v < V; ++v) { acc.x += c[v].x * c[v].x; acc.y += c[v].y * c[v].y; acc.z += c[v].z * c[v].z; acc.w += c[v].w * c[v].w; }
    part4[ty][tx] = acc;
    __syncthreads();
    float4 r = part4[0][tx];
    #pragma unroll
    for (int k = 1; k < G; ++k) { r.x += part4[k][tx].x; r.y += part4[k][tx].y; r.z += part4[k][tx].z; r.w += part4[k][tx].w; }
    const float sx = 1.0f / sqrtf(r.x / R + 1e-5f), sy = 1.0f / sqrtf(r.y / R + 1e-5f), sz = 1.0f / sqrtf(r.z / R + 1e-5f), sw = 1.0f / sqrtf(r.w / R + 1e-5f);
    #pragma unroll
    for (int v = 0; v < V; ++v) {
      const int64_t j = ty + G * v;
      if (i4 < q && j < R) {
        float4 res = make_float4(c[v].x * sx, c[v].y * sy, c[v].z * sz, c[v].w * sw);
        float4* p = reinterpret_cast<float4*>(y + (o * R + j) * inner) + i4;
        if (STREAM) __stcs(p, res); else *p = res;
      }
    }
    __syncthreads();
  }
}

// Shared-memory staged tile: G row groups x L float4 lanes; the whole R x (4L) tile in smem (dynamic).
template <int G, int L, bool STREAM>
__global__ void __launch_bounds__(G * L) vsmem(int64_t outer, int64_t R, int64_t inner, const float* __restrict__ x, float* __restrict__ y) {
  extern __shared__ float4 tile[];  // R * L
  __shared__ float4 part4[G][L];
  const int tx = threadIdx.x % L, ty = threadIdx.x / L;
  const int64_t q = inner / 4, tiles = (q + L - 1) / L;
  for (int64_t b = blockIdx.x; b < outer * tiles; b += gridDim.x) {
    const int64_t o = b / tiles, i4 = (b % tiles) * L + tx;
    float4 acc = make_float4(0, 0, 0, 0);
    if (i4 < q) {
      #pragma unroll 8
      for (int64_t j = ty; j < R; j += G) {
        const float4* p = reinterpret_cast<const float4*>(x + (o * R + j) * inner) + i4;
        const float4 w = STREAM ? __ldcs(p) : *p;
        tile[j * L + tx] = w;
        acc.x += w.x * w.x; acc.y += w.y * w.y; acc.z += w.z * w.z; acc.w += w.w * w.w;
      }
    }
    part4[ty][tx] = acc;
    __syncthreads();
    float4 r = part4[0][tx];
    #pragma unroll
    for (int k = 1; k < G; ++k) { r.x += part4[k][tx].x; r.y += part4[k][tx].y; r.z += part4[k][tx].z; r.w += part4[k][tx].w; }
    const float sx = 1.0f / sqrtf(r.x / R + 1e-5f), sy = 1.0f / sqrtf(r.y / R + 1e-5f), sz = 1.0f / sqrtf(r.z / R + 1e-5f), sw = 1.0f / sqrtf(r.w / R + 1e-5f);
    if (i4 < q) {
      #pragma unroll 8
      for (int64_t j = ty; j < R; j += G) {
        const float4 w = tile[j * L + tx];
        float4 res = make_float4(w.x * sx, w.y * sy, w.z * sz, w.w * sw);
        float4* p = reinterpret_cast<float4*>(y + (o * R + j) * inner) + i4;
        if (STREAM) __stcs(p, res); else *p = res;
      }
    }
    __syncthreads();
  }
}

__global__ void copyk(const float4* __restrict__ a, float4* __restrict__ b, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) b[i] = a[i];
}

int main() {
  const int64_t O = 16, R = 64, I = 65536, N = O * R * I;
  float *x, *y, *ref, *flush;
  CK(cudaMalloc(&x, N * 4)); CK(cudaMalloc(&y, N * 4)); CK(cudaMalloc(&ref, N * 4));
  const size_t FL = 256 << 20; CK(cudaMalloc(&flush, FL));
  std::vector<float> h(N);
  uint32_t s = 12345; for (int64_t i = 0; i < N; ++i) { s = s * 1664525u + 1013904223u; h[i] = ((s >> 8) / 16777216.0f) * 2 - 1; }
  CK(cudaMemcpy(x, h.data(), N * 4, cudaMemcpyHostToDevice));
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  const int64_t tb = O * ((I / 4 + 31) / 32);
  auto timeit = [&](const char* name, auto launch) {
    std::vector<float> t;
    for (int r = 0; r < 25; ++r) {
      CK(cudaMemsetAsync(flush, r, FL));
      cudaEventRecord(a); launch(); cudaEventRecord(b); CK(cudaEventSynchronize(b));
      float ms; cudaEventElapsedTime(&ms, a, b); if (r >= 3) t.push_back(ms);
    }
    CK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    // check against ref
    std::vector<float> hy(4096), hr(4096);
    double err = 0;
    for (int64_t off : {int64_t(0), N / 2 + 777, N - 4096}) {
      CK(cudaMemcpy(hy.data(), y + off, 4096 * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(hr.data(), ref + off, 4096 * 4, cudaMemcpyDeviceToHost));
      for (int i = 0; i < 4096; ++i) err = std::max(err, (double)fabsf(hy[i] - hr[i]));
    }
    double gbs = 2.0 * N * 4 / (t[t.size() / 2] * 1e-3) / 1e9;
    printf("%-28s median %.4f ms  min %.4f  %7.0f GB/s  maxerr %.2e\n", name, t[t.size() / 2], t[0], gbs, err);
    CK(cudaMemset(y, 0, N * 4));
  };
  v0<false><<<tb, 256>>>(O, R, I, x, ref); CK(cudaDeviceSynchronize());
  timeit("copy kernel", [&] { copyk<<<132 * 16, 256>>>((const float4*)x, (float4*)ref + 0, 0); copyk<<<132 * 16, 256>>>((const float4*)x, (float4*)y, N / 4); });
  timeit("memcpy d2d", [&] { cudaMemcpyAsync(y, x, N * 4, cudaMemcpyDeviceToDevice); });
  timeit("v0 reread", [&] { v0<false><<<tb, 256>>>(O, R, I, x, y); });
  timeit("v0 reread stcs", [&] { v0<true><<<tb, 256>>>(O, R, I, x, y); });
  timeit("vreg G8 V8", [&] { vreg<8, 8, false><<<tb, 256>>>(O, R, I, x, y); });
  timeit("vreg G8 V8 stream", [&] { vreg<8, 8, true><<<tb, 256>>>(O, R, I, x, y); });
  timeit("vreg G16 V4", [&] { vreg<16, 4, false><<<tb, 512>>>(O, R, I, x, y); });
  timeit("vreg G16 V4 stream", [&] { vreg<16, 4, true><<<tb, 512>>>(O, R, I, x, y); });
  timeit("vreg G32 V2", [&] { vreg<32, 2, false><<<tb, 1024>>>(O, R, I, x, y); });
  timeit("vreg G32 V2 stream", [&] { vreg<32, 2, true><<<tb, 1024>>>(O, R, I, x, y); });
  timeit("vreg G4 V16", [&] { vreg<4, 16, false><<<tb, 128>>>(O, R, I, x, y); });
  timeit("vreg G4 V16 stream", [&] { vreg<4, 16, true><<<tb, 128>>>(O, R, I, x, y); });
  timeit("vreg G8 V8 grid132x8", [&] { vreg<8, 8, false><<<132 * 8, 256>>>(O, R, I, x, y); });
  {
    auto k1 = vsmem<8, 32, false>; auto k2 = vsmem<8, 32, true>; auto k3 = vsmem<4, 32, false>; auto k4 = vsmem<8, 16, false>; auto k5 = vsmem<16, 16, false>;
    const size_t sm32 = R * 32 * 16, sm16 = R * 16 * 16;
    CK(cudaFuncSetAttribute(k1, cudaFuncAttributeMaxDynamicSharedMemorySize, sm32));
    CK(cudaFuncSetAttribute(k2, cudaFuncAttributeMaxDynamicSharedMemorySize, sm32));
    CK(cudaFuncSetAttribute(k3, cudaFuncAttributeMaxDynamicSharedMemorySize, sm32));
    const int64_t tb16 = O * ((I / 4 + 15) / 16);
    timeit("vsmem G8 L32", [&] { k1<<<tb, 256, sm32>>>(O, R, I, x, y); });
    timeit("vsmem G8 L32 stream", [&] { k2<<<tb, 256, sm32>>>(O, R, I, x, y); });
    timeit("vsmem G4 L32", [&] { k3<<<tb, 128, sm32>>>(O, R, I, x, y); });
    timeit("vsmem G8 L16", [&] { k4<<<tb16, 128, sm16>>>(O, R, I, x, y); });
    timeit("vsmem G16 L16", [&] { k5<<<tb16, 256, sm16>>>(O, R, I, x, y); });
  }
  timeit("v0 reread (again)", [&] { v0<false><<<tb, 256>>>(O, R, I, x, y); });
  timeit("vreg G8 V8 (again)", [&] { vreg<8, 8, false><<<tb, 256>>>(O, R, I, x, y); });
  return 0;
}
