// Kernel lab: softmax over the rows of a 4096 x 16384 float32 matrix, a block per row held in
// registers as float4, variants timed side by side (bench/lab/README.md).
// MODE 0: online max/sum (the first seed's statistics: two exponentials per element, one more for the
//         output); MODE 1: max first, then the sum, exp recomputed for the output (two per element);
// MODE 2: max first, exp(x - m) kept in the register for the output (one per element).
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>
#include <cmath>
#include <cuda_runtime.h>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("err %s line %d\n", cudaGetErrorString(e), __LINE__); exit(1);} } while (0)

template <int OP>
__device__ __forceinline__ float comb(float a, float b) { return OP == 0 ? a + b : fmaxf(a, b); }

template <int OP>
__device__ float block_reduce(float v, float* scratch) {
  for (int o = 16; o > 0; o >>= 1) v = comb<OP>(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < nwarps ? scratch[lane] : (OP == 0 ? 0.0f : -INFINITY);
    for (int o = 16; o > 0; o >>= 1) v = comb<OP>(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (lane == 0) scratch[32] = v;
  }
  __syncthreads();
  return scratch[32];
}

template <int V, int MODE, int T>
__global__ void __launch_bounds__(T) softmax_rows(int64_t rows, int64_t R, const float* __restrict__ x, float* __restrict__ y) {
  __shared__ float scratch[33];
  for (int64_t o = blockIdx.x; o < rows; o += gridDim.x) {
    const float4* xr4 = reinterpret_cast<const float4*>(x + o * R);
    float4* yr4 = reinterpret_cast<float4*>(y + o * R);
    float r[4 * V];
    #pragma unroll
    for (int i = 0; i < V; ++i) {
      const int64_t j4 = threadIdx.x + (int64_t)i * T;
      float4 w = j4 * 4 < R ? xr4[j4] : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
      r[4 * i] = w.x; r[4 * i + 1] = w.y; r[4 * i + 2] = w.z; r[4 * i + 3] = w.w;
    }
    float m = -INFINITY, s = 0.0f;
    if (MODE == 0) {
      #pragma unroll
      for (int i = 0; i < 4 * V; ++i) {
        const float mn = fmaxf(m, r[i]);
        s = s * expf(m - mn) + expf(r[i] - mn);
        m = mn;
      }
      const float bm = block_reduce<1>(m, scratch);
      s = m == -INFINITY ? 0.0f : s * expf(m - bm);
      s = block_reduce<0>(s, scratch);
      m = bm;
    } else {
      #pragma unroll
      for (int i = 0; i < 4 * V; ++i) m = fmaxf(m, r[i]);
      m = block_reduce<1>(m, scratch);
      #pragma unroll
      for (int i = 0; i < 4 * V; ++i) {
        const float e = expf(r[i] - m);
        if (MODE == 2) r[i] = e;
        s += e;
      }
      s = block_reduce<0>(s, scratch);
    }
    const float inv = 1.0f / s;
    #pragma unroll
    for (int i = 0; i < V; ++i) {
      const int64_t j4 = threadIdx.x + (int64_t)i * T;
      if (j4 * 4 < R) {
        float4 out;
        if (MODE == 2) {
          out = make_float4(r[4 * i] * inv, r[4 * i + 1] * inv, r[4 * i + 2] * inv, r[4 * i + 3] * inv);
        } else {
          out = make_float4(expf(r[4 * i] - m) * inv, expf(r[4 * i + 1] - m) * inv,
                            expf(r[4 * i + 2] - m) * inv, expf(r[4 * i + 3] - m) * inv);
        }
        yr4[j4] = out;
      }
    }
  }
}

int main() {
  const int64_t rows = 4096, R = 16384, N = rows * R;
  float *x, *y, *ref, *flush;
  CK(cudaMalloc(&x, N * 4)); CK(cudaMalloc(&y, N * 4)); CK(cudaMalloc(&ref, N * 4));
  const size_t FL = 256 << 20; CK(cudaMalloc(&flush, FL));
  std::vector<float> h(N);
  uint32_t st = 12345;
  for (int64_t i = 0; i < N; ++i) { st = st * 1664525u + 1013904223u; h[i] = ((st >> 8) / 16777216.0f) * 8 - 4; }
  CK(cudaMemcpy(x, h.data(), N * 4, cudaMemcpyHostToDevice));
  cudaEvent_t a, b; cudaEventCreate(&a); cudaEventCreate(&b);
  const unsigned grid = (unsigned)rows;
  softmax_rows<8, 0, 512><<<grid, 512>>>(rows, R, x, ref);
  CK(cudaDeviceSynchronize());
  auto timeit = [&](const char* name, auto launch) {
    std::vector<float> t;
    for (int r = 0; r < 25; ++r) {
      CK(cudaMemsetAsync(flush, r, FL));
      cudaEventRecord(a); launch(); cudaEventRecord(b); CK(cudaEventSynchronize(b));
      float ms; cudaEventElapsedTime(&ms, a, b); if (r >= 3) t.push_back(ms);
    }
    CK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    std::vector<float> hy(4096), hr(4096);
    double err = 0;
    for (int64_t off : {int64_t(0), N / 2 + 777, N - 4096}) {
      CK(cudaMemcpy(hy.data(), y + off, 4096 * 4, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(hr.data(), ref + off, 4096 * 4, cudaMemcpyDeviceToHost));
      for (int i = 0; i < 4096; ++i) err = std::max(err, (double)fabsf(hy[i] - hr[i]) / (fabsf(hr[i]) + 1e-30));
    }
    const double gbs = 2.0 * N * 4 / (t[t.size() / 2] * 1e-3) / 1e9;
    printf("%-34s median %.4f ms  min %.4f  %7.0f GB/s  max rel err vs online %.2e\n", name, t[t.size() / 2], t[0], gbs, err);
    CK(cudaMemset(y, 0, N * 4));
  };
  timeit("memcpy d2d (floor)", [&] { cudaMemcpyAsync(y, ref, N * 4, cudaMemcpyDeviceToDevice); });
  timeit("online, 512 threads x 8 float4", [&] { softmax_rows<8, 0, 512><<<grid, 512>>>(rows, R, x, y); });
  timeit("max first, 2 exp, 512 x 8", [&] { softmax_rows<8, 1, 512><<<grid, 512>>>(rows, R, x, y); });
  timeit("max first, 1 exp, 512 x 8", [&] { softmax_rows<8, 2, 512><<<grid, 512>>>(rows, R, x, y); });
  timeit("online, 1024 x 4", [&] { softmax_rows<4, 0, 1024><<<grid, 1024>>>(rows, R, x, y); });
  timeit("max first, 1 exp, 1024 x 4", [&] { softmax_rows<4, 2, 1024><<<grid, 1024>>>(rows, R, x, y); });
  timeit("online, 256 x 16", [&] { softmax_rows<16, 0, 256><<<grid, 256>>>(rows, R, x, y); });
  timeit("max first, 1 exp, 256 x 16", [&] { softmax_rows<16, 2, 256><<<grid, 256>>>(rows, R, x, y); });
  timeit("online, 512 x 8 (again)", [&] { softmax_rows<8, 0, 512><<<grid, 512>>>(rows, R, x, y); });
  timeit("max first, 1 exp, 512 x 8 (again)", [&] { softmax_rows<8, 2, 512><<<grid, 512>>>(rows, R, x, y); });
  return 0;
}
