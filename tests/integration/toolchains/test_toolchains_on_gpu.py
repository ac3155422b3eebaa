"""On a machine with a GPU: a unit nvcc built for sm_90 runs there through the C ABI (cudart static).

Skipped without CUDA; run on the H200 through the device tool. The ABI descriptors are spelled out
here with ctypes so this check depends on the header alone, not on the evaluation engine.
"""

from __future__ import annotations

import ctypes
import shutil
from pathlib import Path

import pytest

from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.tasks.loading import load_task
from kernelfoundry.tasks.summary import TensorInfo
from kernelfoundry.tasks.validation import validate_task
from kernelfoundry.toolchains import BuildCache, BuildTarget, build

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed"),
]

FIXTURES = Path(__file__).parents[2] / "fixtures" / "tasks"

AXPB_UNIT = r"""
#include "kf_abi.h"
// @kf.tunable THREADS in [128, 256] default 256
#ifndef THREADS
#define THREADS 256
#endif
__global__ void axpb(const float* x, float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = 3.0f * x[i] + 1.0f;
}
KF_DEFINE_ABI_VERSION()
KF_EXPORT int kf_forward(const kf_tensor* in, int32_t n_in, kf_tensor* out, int32_t n_out, void* stream) {
  const int64_t n = kf_numel(&in[0]);
  axpb<<<(n + THREADS - 1) / THREADS, THREADS, 0, (cudaStream_t)stream>>>(
      KF_DATA(const float, &in[0]), KF_DATA(float, &out[0]), n);
  return cudaGetLastError() == cudaSuccess ? KF_OK : KF_ERR_LAUNCH;
}
"""


class Device(ctypes.Structure):
    _fields_ = (("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32))


class DType(ctypes.Structure):
    _fields_ = (("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16))


class Tensor(ctypes.Structure):
    _fields_ = (
        ("data", ctypes.c_void_p),
        ("device", Device),
        ("ndim", ctypes.c_int32),
        ("dtype", DType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    )


def describe(tensor, keep: list) -> Tensor:
    shape = (ctypes.c_int64 * tensor.dim())(*tensor.shape)
    strides = (ctypes.c_int64 * tensor.dim())(*tensor.stride())
    keep += [shape, strides]
    return Tensor(
        tensor.data_ptr(),
        Device(2, tensor.device.index or 0),
        tensor.dim(),
        DType(2, 32, 1),
        shape,
        strides,
        0,
    )


def test_cuda_unit_built_for_sm90_computes_on_the_device(tmp_path):
    result = build(
        KernelSource("cuda", AXPB_UNIT, params={"THREADS": 128}),
        BuildTarget.parse("cuda.sm90"),
        BuildCache(tmp_path),
    )
    assert result.ok, result.log
    library = ctypes.CDLL(str(result.artifact))
    assert library.kf_abi_version() == 1
    x = torch.randn(1 << 20, device="cuda")
    y = torch.full_like(x, float("nan"))
    keep: list = []
    inputs, outputs = (Tensor * 1)(describe(x, keep)), (Tensor * 1)(describe(y, keep))
    stream = torch.cuda.current_stream()
    code = library.kf_forward(inputs, 1, outputs, 1, ctypes.c_void_p(stream.cuda_stream))
    stream.synchronize()
    assert code == 0
    torch.testing.assert_close(y, 3.0 * x + 1.0)


def test_task_validates_on_the_cuda_device():
    summary = validate_task(load_task(FIXTURES / "scale_shift"), timeout_s=120, device="cuda")
    assert summary.device == "cuda:0", summary.notes  # validated on the GPU itself, not a stand-in
    assert summary.shapes[0].outputs == (TensorInfo((4, 32), "float32"),)
