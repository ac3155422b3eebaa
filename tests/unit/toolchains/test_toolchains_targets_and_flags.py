"""Build targets, per-toolchain flags, defines, log trimming and cache keys (no compiler runs)."""

from __future__ import annotations

import platform

import pytest

from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.toolchains import BuildTarget, build, toolchain_for
from kernelfoundry.toolchains import gxx as gxx_module
from kernelfoundry.toolchains.build import define_flags
from kernelfoundry.toolchains.cache import BuildCache, build_key
from kernelfoundry.toolchains.gxx import GxxToolchain
from kernelfoundry.toolchains.nvcc import NvccToolchain, arch_flag
from kernelfoundry.toolchains.result import trim_log
from kernelfoundry.toolchains.toolchain import UnsupportedTarget

x86_only = pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 architecture tokens")


@pytest.mark.parametrize("token", ["cpu.x86_64", "cuda.sm90", "cpu.native", "cuda.sm90a"])
def test_target_round_trips_through_its_subject_token(token):
    assert BuildTarget.parse(token).subject_token() == token
    assert f"kf.compile.{BuildTarget.parse(token)}" == f"kf.compile.{token}"


@pytest.mark.parametrize("token", ["cpu", "cpu.", "gpu.sm90", "cuda.SM90", "cuda.sm.90"])
def test_malformed_target_token_is_rejected(token):
    with pytest.raises(ValueError):
        BuildTarget.parse(token)


def test_toolchain_is_chosen_by_backend():
    assert isinstance(toolchain_for(BuildTarget("cpu", "x86_64")), GxxToolchain)
    assert isinstance(toolchain_for(BuildTarget("cuda", "sm90")), NvccToolchain)


@x86_only
def test_x86_64_uses_level_v3_only_when_the_host_has_avx2(monkeypatch):
    target = BuildTarget("cpu", "x86_64")
    monkeypatch.setattr(
        gxx_module,
        "host_cpu_flags",
        lambda: frozenset({"avx", "avx2", "bmi1", "bmi2", "fma", "f16c", "movbe"}),
    )
    assert "-march=x86-64-v3" in GxxToolchain().flags(target)
    monkeypatch.setattr(gxx_module, "host_cpu_flags", lambda: frozenset({"sse2", "avx"}))
    assert "-march=x86-64" in GxxToolchain().flags(target)


@x86_only
def test_gxx_flags_are_the_documented_ones():
    assert GxxToolchain().flags(BuildTarget("cpu", "x86_64_v2")) == (
        "-O3",
        "-fno-math-errno",
        "-fopenmp",
        "-march=x86-64-v2",
        "-shared",
        "-fPIC",
        "-std=c++17",
    )
    assert "-march=native" in GxxToolchain().flags(BuildTarget("cpu", "native"))


def test_gxx_refuses_an_architecture_it_cannot_build_for():
    with pytest.raises(UnsupportedTarget, match="riscv64"):
        GxxToolchain().flags(BuildTarget("cpu", "riscv64"))


@pytest.mark.parametrize(
    ("token", "flag"),
    [
        ("sm90", "-gencode=arch=compute_90a,code=sm_90a"),  # every cap-9.0 device runs sm_90a code
        ("sm90a", "-gencode=arch=compute_90a,code=sm_90a"),
        ("sm100", "-arch=sm_100"),
        ("sm100a", "-gencode=arch=compute_100a,code=sm_100a"),
        ("sm80", "-arch=sm_80"),
    ],
)
def test_cuda_architecture_token_maps_to_nvcc_arch(token, flag):
    assert arch_flag(token) == flag
    assert flag in NvccToolchain().flags(BuildTarget("cuda", token))


def test_nvcc_links_cudart_statically():
    assert "-cudart=static" in NvccToolchain().flags(BuildTarget("cuda", "sm90"))


def test_nvcc_refuses_a_non_sm_architecture():
    with pytest.raises(UnsupportedTarget):
        arch_flag("ampere")


def test_defines_are_sorted_and_spelled_as_d_flags():
    assert define_flags({"VEC": "float4", "BLOCK": 128}) == ("-DBLOCK=128", "-DVEC=float4")


@pytest.mark.parametrize(
    "defines", [{"1BAD": 1}, {"X": "a b"}, {"X": "1;rm"}, {"X -o/tmp/x": 1}, {"X": "1\n"}, {"X\n": 1}]
)
def test_defines_that_are_not_tokens_are_rejected(defines):
    with pytest.raises(ValueError):
        define_flags(defines)


def test_missing_toolchain_is_a_result_not_an_exception():
    source = KernelSource("cpp", "int x;")
    result = build(source, BuildTarget("cpu", "native"), toolchain=GxxToolchain(executable="kf-no-such-gxx"))
    assert (result.ok, result.reason, result.artifact) == (False, "toolchain_missing", None)
    assert "kf-no-such-gxx" in result.log


def test_source_in_another_language_is_language_mismatch():
    result = build(KernelSource("cuda", "int x;"), BuildTarget("cpu", "native"))
    assert result.reason == "language_mismatch" and "cuda" in result.log


def test_unsupported_architecture_is_a_result():
    result = build(KernelSource("cpp", "int x;"), BuildTarget("cpu", "riscv64"))
    assert result.reason == "unsupported_target"


def test_bad_define_is_a_result():
    result = build(KernelSource("cpp", "int x;", params={"X": "a b"}), BuildTarget("cpu", "native"))
    assert result.reason == "bad_define" and "X" in result.log


def test_short_log_is_kept_whole():
    assert trim_log("  unit.cpp:1: error: x\n") == "unit.cpp:1: error: x"


def test_long_log_keeps_the_first_error_and_says_what_was_trimmed():
    noise = [f"note: included from {i}" for i in range(200)]
    errors = [f"unit.cpp:{i}: error: problem {i}" for i in range(2000)]
    trimmed = trim_log("\n".join([*noise, *errors]), limit=2000)
    assert len(trimmed) < 2200
    assert "unit.cpp:0: error: problem 0" in trimmed
    assert "note: included from 199" in trimmed  # context just before the first error
    assert "note: included from 0" not in trimmed
    assert "lines before the first error trimmed" in trimmed and trimmed.endswith("lines trimmed]")


def test_cache_key_depends_on_everything_that_decides_the_bytes():
    base = build_key("code", "kf_forward", ("-O3",), "g++ 12", "cpu.x86_64")
    assert base == build_key("code", "kf_forward", ("-O3",), "g++ 12", "cpu.x86_64")
    variants = [
        build_key("code2", "kf_forward", ("-O3",), "g++ 12", "cpu.x86_64"),
        build_key("code", "other", ("-O3",), "g++ 12", "cpu.x86_64"),
        build_key("code", "kf_forward", ("-O3", "-DX=1"), "g++ 12", "cpu.x86_64"),
        build_key("code", "kf_forward", ("-O3",), "g++ 13", "cpu.x86_64"),
        build_key("code", "kf_forward", ("-O3",), "g++ 12", "cpu.native"),
    ]
    assert len({base, *variants}) == 6


def test_cache_returns_what_was_stored(tmp_path):
    cache = BuildCache(tmp_path / "cache")
    assert cache.lookup("ab" * 32) is None
    built = tmp_path / "lib.so"
    built.write_bytes(b"\x7fELF fake")
    artifact = cache.store("ab" * 32, built, {"ok": True, "reason": None, "log": ""})
    entry = cache.lookup("ab" * 32)
    assert entry is not None and entry.artifact == artifact and artifact.read_bytes() == b"\x7fELF fake"
    cache.store("cd" * 32, None, {"ok": False, "reason": "compile_error", "log": "error: x"})
    failure = cache.lookup("cd" * 32)
    assert failure is not None and failure.artifact is None and failure.record["reason"] == "compile_error"


def test_cache_entry_whose_library_vanished_is_a_miss(tmp_path):
    cache = BuildCache(tmp_path)
    built = tmp_path / "lib.so"
    built.write_bytes(b"x")
    cache.store("ef" * 32, built, {"ok": True, "reason": None, "log": ""}).unlink()
    assert cache.lookup("ef" * 32) is None
