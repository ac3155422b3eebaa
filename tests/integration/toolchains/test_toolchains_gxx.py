"""Real g++ builds through kernelfoundry.toolchains: success, errors, cache, limits, exports."""

from __future__ import annotations

import ctypes
import shutil
import threading
from pathlib import Path

import pytest

from kernelfoundry.domain.kernel import KernelSource, Tunable
from kernelfoundry.tasks.loading import load_task
from kernelfoundry.toolchains import BuildCache, BuildTarget, Limits, build

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not installed")

SCALE_UNIT = r"""
#include "kf_abi.h"
// @kf.tunable SCALE in [1, 2, 3] default 1
#ifndef SCALE
#define SCALE 1
#endif

KF_DEFINE_ABI_VERSION()

KF_EXPORT int kf_scale(void) { return SCALE; }

KF_EXPORT int kf_forward(const kf_tensor* in, int32_t n_in, kf_tensor* out, int32_t n_out, void* stream) {
  if (n_in != 1 || n_out != 1) return KF_ERR_BAD_ARGUMENTS;
  const float* x = KF_DATA(const float, &in[0]);
  float* y = KF_DATA(float, &out[0]);
  const int64_t n = kf_numel(&in[0]);
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * SCALE;
  return KF_OK;
}
"""

TARGET = BuildTarget("cpu", "native")
SCALE_TUNABLE = (Tunable("SCALE", (1, 2, 3), 1),)

# Eighty million distinct template instantiations: g++ works on this for minutes.
SLOW_TO_COMPILE = r"""
#include <utility>
#include "kf_abi.h"
template <int A, int N> struct Chain { static constexpr long value = Chain<A, N - 1>::value + A; };
template <int A> struct Chain<A, 0> { static constexpr long value = 0; };
template <int... A> constexpr long total(std::integer_sequence<int, A...>) {
  return (Chain<A, 800>::value + ...);
}
static_assert(total(std::make_integer_sequence<int, 100000>{}) != 0, "many distinct instantiations");
KF_DEFINE_ABI_VERSION()
"""


def unit(code: str = SCALE_UNIT, **params: int) -> KernelSource:
    return KernelSource("cpp", code, tunables=SCALE_TUNABLE, params=params)


def test_good_unit_builds_into_a_loadable_library(tmp_path):
    result = build(unit(), TARGET, out_dir=tmp_path)
    assert result.ok and result.reason is None and not result.cache_hit, result.log
    assert result.artifact is not None and result.artifact.parent == tmp_path
    assert result.toolchain.startswith("g++ ")
    assert {"-O3", "-fopenmp", "-march=native", "-shared", "-fPIC", "-std=c++17", "-DSCALE=1"} <= set(
        result.flags
    )
    library = ctypes.CDLL(str(result.artifact))
    assert library.kf_abi_version() == 1


def test_tunable_values_reach_the_compiler_as_defines(tmp_path):
    default = build(unit(), TARGET, out_dir=tmp_path / "a")
    chosen = build(unit(SCALE=3), TARGET, out_dir=tmp_path / "b")
    assert ctypes.CDLL(str(default.artifact)).kf_scale() == 1
    assert ctypes.CDLL(str(chosen.artifact)).kf_scale() == 3


def test_compile_error_comes_back_with_the_compiler_message():
    result = build(unit(SCALE_UNIT.replace("x[i] * SCALE", "x[j] * SCALE")), TARGET)
    assert (result.ok, result.reason, result.artifact) == (False, "compile_error", None)
    assert "'j' was not declared" in result.log
    assert "unit.cpp:" in result.log and "kf-build-" not in result.log  # private build path stripped


def test_repeated_candidate_is_a_cache_hit_with_the_same_bytes(tmp_path):
    cache = BuildCache(tmp_path)
    first = build(unit(), TARGET, cache)
    second = build(unit(), TARGET, cache)
    assert first.ok and not first.cache_hit
    assert second.ok and second.cache_hit
    assert second.artifact == first.artifact and second.flags == first.flags
    assert second.artifact.read_bytes() == first.artifact.read_bytes()
    other = build(unit(SCALE=2), TARGET, cache)
    assert not other.cache_hit and other.artifact != first.artifact


def test_compile_errors_are_cached_too(tmp_path):
    cache = BuildCache(tmp_path)
    broken = unit("int broken( {")
    first = build(broken, TARGET, cache)
    second = build(broken, TARGET, cache)
    assert first.reason == second.reason == "compile_error"
    assert second.cache_hit and second.log == first.log


def test_concurrent_builds_of_one_candidate_are_safe(tmp_path):
    cache = BuildCache(tmp_path)
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(build(unit(), TARGET, cache))) for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert all(r.ok for r in results) and len({r.artifact for r in results}) == 1
    assert ctypes.CDLL(str(results[0].artifact)).kf_abi_version() == 1
    assert not list((tmp_path / "tmp").iterdir())  # scratch directories are cleaned up


def test_build_past_its_deadline_is_compile_timeout_and_not_cached(tmp_path):
    cache = BuildCache(tmp_path)
    result = build(unit(SLOW_TO_COMPILE), TARGET, cache, limits=Limits(wall_s=1.0))
    assert (result.ok, result.reason) == (False, "compile_timeout")
    assert "deadline of 1 s" in result.log
    again = build(unit(SLOW_TO_COMPILE), TARGET, cache, limits=Limits(wall_s=1.0))
    assert not again.cache_hit


def test_compiler_starved_of_memory_is_resource_limit():
    result = build(unit(), TARGET, limits=Limits(memory_bytes=48 << 20))
    assert (result.ok, result.reason) == (False, "resource_limit"), result.log
    assert "resource limit" in result.log


def test_unit_without_its_entry_point_is_missing_entry_point():
    result = build(KernelSource("cpp", SCALE_UNIT, entry_point="kf_other"), TARGET)
    assert (result.ok, result.reason, result.artifact) == (False, "missing_entry_point", None)
    assert "`kf_other`" in result.log


def test_unit_without_the_abi_version_is_missing_entry_point():
    result = build(unit(SCALE_UNIT.replace("KF_DEFINE_ABI_VERSION()", "")), TARGET)
    assert result.reason == "missing_entry_point" and "`kf_abi_version`" in result.log


def test_entry_point_with_cpp_linkage_gets_a_hint():
    code = SCALE_UNIT.replace("KF_EXPORT int kf_forward", "int kf_forward")
    result = build(unit(code), TARGET)
    assert result.reason == "missing_entry_point"
    assert "C++ name mangling" in result.log


def test_initial_kernel_of_a_task_folder_builds_with_its_tunable_default(tmp_path):
    task = load_task(Path(__file__).parents[2] / "fixtures" / "tasks" / "scale_shift")
    cpp = next(kernel for kernel in task.initial_kernels if kernel.language == "cpp")
    result = build(cpp, TARGET, BuildCache(tmp_path))
    assert result.ok, result.log
    assert "-DBLOCK=32" in result.flags
