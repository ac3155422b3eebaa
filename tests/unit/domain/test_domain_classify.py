from kernelfoundry.domain.descriptors import Descriptors, classify, strip_comments
from kernelfoundry.domain.kernel import KernelSource

NAIVE_CUDA = """
__global__ void relu(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = fmaxf(x[i], 0.f);
}
"""

TILED_MATMUL = """
#define TILE 32
__global__ void mm(const float* A, const float* B, float* C, int n) {
  __shared__ float As[TILE][TILE];
  __shared__ float Bs[TILE][TILE];
  float acc = 0.f;
  for (int k0 = 0; k0 < n; k0 += TILE) {
    As[threadIdx.y][threadIdx.x] = A[0];
    __syncthreads();
    for (int k = 0; k < TILE; ++k) acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];
    __syncthreads();
  }
  C[0] = acc;
}
"""

WARP_SOFTMAX = """
__global__ void softmax(const float* x, float* y, int n) {
  float running_max = -1e30f, sum = 0.f;
  for (int i = threadIdx.x; i < n; i += 32) {
    float m_new = fmaxf(running_max, x[i]);
    sum = sum * __expf(running_max - m_new) + __expf(x[i] - m_new);
    running_max = m_new;
  }
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffff, sum, o);
  y[0] = sum;
}
"""

ATOMIC_SUM = """
__global__ void total(const float4* x, float* out, int n) {
  float4 v = x[threadIdx.x];
  atomicAdd(out, v.x + v.y + v.z + v.w);
}
"""

OPENMP = """
#include <omp.h>
extern "C" int kf_forward(const kf_tensor* in, int n_in, kf_tensor* out, int n_out, void* stream) {
  const float* x = (const float*)in[0].data;
  float* y = (float*)out[0].data;
  double total = 0;
  #pragma omp parallel for simd reduction(+:total)
  for (long i = 0; i < 1024; ++i) { y[i] = tanhf(x[i]) * expf(x[i]); total += y[i]; }
  return 0;
}
"""


def cuda(code: str) -> KernelSource:
    return KernelSource("cuda", code)


def test_naive_elementwise_cuda_is_coalesced_direct_and_unsynchronised():
    result = classify(cuda(NAIVE_CUDA), reference_op_count=1)
    assert result.descriptors == Descriptors(1, 0, 0)
    assert any("coalesced thread indexing" in e for e in result.evidence)


def test_shared_memory_tiling_with_barriers_is_memory_two_parallelism_one():
    result = classify(cuda(TILED_MATMUL), reference_op_count=1)
    assert result.descriptors == Descriptors(2, 0, 1)
    assert "memory 2: shared memory (__shared__)" in result.evidence
    assert "parallelism 1: block barrier (__syncthreads)" in result.evidence


def test_warp_shuffles_and_online_softmax_are_detected():
    result = classify(cuda(WARP_SOFTMAX), reference_op_count=3)
    assert result.descriptors.parallelism == 2
    assert result.descriptors.algorithm == 2
    assert any(e.startswith("algorithm 1: fuses") for e in result.evidence)


def test_warp_wide_mma_is_warp_level_parallelism():
    for call in (
        'asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "\n "{%0}, {%1};" : "+f"(c) : "r"(a));',
        "wmma::mma_sync(c, a, b, c);",
    ):
        code = TILED_MATMUL.replace("acc += As[threadIdx.y][k] * Bs[k][threadIdx.x];", call)
        assert classify(cuda(code), reference_op_count=1).descriptors.parallelism == 2, call
    assert classify(cuda(TILED_MATMUL), reference_op_count=1).descriptors.parallelism == 1
    # only an asm statement's template is code: the same words in any other string or comment are not
    quoted = TILED_MATMUL.replace("C[0] = acc;", 'printf("mma.sync.aligned"); /* wmma::mma_sync( */')
    assert classify(cuda(quoted), reference_op_count=1).descriptors.parallelism == 1


def test_atomics_are_global_coordination_and_float4_is_vectorized():
    result = classify(cuda(ATOMIC_SUM), reference_op_count=1)
    assert result.descriptors == Descriptors(1, 0, 3)


def test_openmp_simd_reduction_and_fusion_on_cpu():
    result = classify(KernelSource("cpp", OPENMP), reference_op_count=3)
    assert result.descriptors == Descriptors(1, 1, 2)
    single = classify(KernelSource("cpp", OPENMP), reference_op_count=1)
    assert single.descriptors.algorithm == 0  # nothing to fuse in a one-op reference


def test_openmp_atomic_and_std_atomic_are_level_three():
    code = "void f(){ std::atomic<int> c; \n#pragma omp atomic\n c++; }"
    assert classify(KernelSource("cpp", code), 1).descriptors.parallelism == 3


def test_comments_and_strings_prove_nothing():
    code = (
        "// __shared__ float t[32]; __syncthreads(); atomicAdd(p, 1)\n"
        "/* __shfl_xor_sync( */\n"
        'const char* s = "float4";\n'
    )
    assert classify(cuda(code), 1).descriptors == Descriptors(0, 0, 0)
    assert strip_comments("a /* b\nc */ d").count("\n") == 1


def test_the_analysis_wins_over_the_self_report_and_records_the_disagreement():
    result = classify(cuda(NAIVE_CUDA), 1, reported=Descriptors(3, 2, 2))
    assert result.descriptors == Descriptors(1, 0, 0)
    assert result.reported == Descriptors(3, 2, 2)
    assert not result.agrees
    assert "memory: reported 3, analysed 1" in result.disagreements
    assert classify(cuda(NAIVE_CUDA), 1, reported=Descriptors(1, 0, 0)).agrees


def test_async_copies_into_shared_memory_are_a_multi_level_hierarchy():
    code = TILED_MATMUL.replace("float acc = 0.f;", "float acc = 0.f;\n  __pipeline_memcpy_async(0, 0, 16);")
    assert classify(cuda(code), 1).descriptors.memory == 3


def test_register_tile_counts_as_a_second_level_only_on_top_of_a_tile():
    tiled = TILED_MATMUL.replace("float acc = 0.f;", "float acc[4][4] = {0};")
    result = classify(cuda(tiled), 1)
    assert result.descriptors.memory == 3
    assert "memory 3: register accumulator tile on top of a shared/cache tile" in result.evidence
    alone = "__global__ void f(float* y) {\n  float acc[4];\n  y[0] = acc[0];\n}\n"
    assert classify(cuda(alone), 1).descriptors.memory == 0


def test_block_stride_loop_is_not_tiling_but_a_cache_blocked_cpu_loop_is():
    stride = (
        "__global__ void f(float* x, int n) {\n"
        "  for (int i = threadIdx.x; i < n; i += BLOCK_SIZE) x[i] = 0;\n"
        "}\n"
    )
    assert classify(cuda(stride), 1).descriptors.memory == 0
    blocked = (
        "void f(float* c, const float* a, int n) {\n"
        "  for (int i0 = 0; i0 < n; i0 += BM)\n"
        "    for (int k0 = 0; k0 < n; k0 += BK)\n"
        "      c[i0] += a[k0];\n"
        "}\n"
    )
    assert classify(KernelSource("cpp", blocked), 1).descriptors.memory == 2


def test_one_kernel_per_reference_op_is_not_fusion():
    two_kernels = (
        "__global__ void a(float* x) { x[0] = __expf(x[0]); }\n"
        "__global__ void b(float* x) { x[0] = fmaxf(x[0], 0.f); }\n"
    )
    assert classify(cuda(two_kernels), reference_op_count=2).descriptors.algorithm == 0
    fused = "__global__ void ab(float* x) { x[0] = fmaxf(__expf(x[0]), 0.f); }\n"
    assert classify(cuda(fused), reference_op_count=2).descriptors.algorithm == 1
