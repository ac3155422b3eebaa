"""A real nvcc build of a small CUDA unit for sm_90 (no GPU needed to compile)."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.toolchains import BuildCache, BuildTarget, build

pytestmark = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")

DOUBLE_UNIT = r"""
#include "kf_abi.h"
// @kf.tunable THREADS in [128, 256] default 256
#ifndef THREADS
#define THREADS 256
#endif

__global__ void double_kernel(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i];
}

KF_DEFINE_ABI_VERSION()

KF_EXPORT int kf_forward(const kf_tensor* in, int32_t n_in, kf_tensor* out, int32_t n_out, void* stream) {
  const int64_t n = kf_numel(&in[0]);
  double_kernel<<<(n + THREADS - 1) / THREADS, THREADS, 0, (cudaStream_t)stream>>>(
      KF_DATA(const float, &in[0]), KF_DATA(float, &out[0]), n);
  return cudaGetLastError() == cudaSuccess ? KF_OK : KF_ERR_LAUNCH;
}
"""


def test_cuda_unit_builds_for_sm90_with_static_cudart(tmp_path):
    source = KernelSource("cuda", DOUBLE_UNIT, params={"THREADS": 128})
    result = build(source, BuildTarget.parse("cuda.sm90"), BuildCache(tmp_path))
    assert result.ok, result.log
    assert (
        result.toolchain.startswith("nvcc ")
        and "-gencode=arch=compute_90a,code=sm_90a" in result.flags
        and "-DTHREADS=128" in result.flags
    )
    needed = subprocess.run(["readelf", "-d", str(result.artifact)], capture_output=True, text=True).stdout
    assert "libcudart" not in needed  # the executor needs only the driver


def test_cuda_compile_error_names_the_line():
    broken = DOUBLE_UNIT.replace("2.0f * x[i]", "2.0f * x[j]")
    result = build(KernelSource("cuda", broken), BuildTarget.parse("cuda.sm90"))
    assert result.reason == "compile_error"
    assert 'identifier "j" is undefined' in result.log and "unit.cu(" in result.log
