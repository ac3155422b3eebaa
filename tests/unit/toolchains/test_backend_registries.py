"""The compile side's backends (toolchains.TOOLCHAINS) and the evaluation side's (evaluation.backends)
name the same backends, agree on the language, and a build target accepts exactly those names."""

import platform
import stat
from pathlib import Path

import pytest

from kernelfoundry.evaluation.backends import BACKENDS as EVALUATION_BACKENDS
from kernelfoundry.evaluation.backends import backend_for_device, backend_named
from kernelfoundry.toolchains import BACKENDS, BuildTarget, UnsupportedTarget, toolchain_for
from kernelfoundry.toolchains.clang import ClangToolchain, find_clangxx
from kernelfoundry.toolchains.toolchain import TOOLCHAINS


def test_every_backend_is_registered_on_both_sides_with_one_language():
    assert set(TOOLCHAINS) == set(EVALUATION_BACKENDS) == set(BACKENDS)
    for name in BACKENDS:
        toolchain = toolchain_for(BuildTarget(name, "x86_64"))
        backend = backend_named(name)
        assert backend.language in toolchain.languages
        assert backend.file_suffix == toolchain.source_suffix


def test_a_device_string_names_the_first_backend_of_its_kind():
    assert backend_for_device("cpu").name == "cpu"
    assert backend_for_device("cuda:0").name == "cuda"
    assert backend_named("cpu_clang").device_kind == "cpu"


def test_build_targets_accept_the_registered_backends_only():
    assert BuildTarget.parse("cpu_clang.x86_64").backend == "cpu_clang"
    with pytest.raises(ValueError, match="known: cpu, cuda, cpu_clang"):
        BuildTarget.parse("rocm.gfx942")


def _executable(folder: Path, name: str) -> None:
    path = folder / name
    path.write_text("#!/bin/sh\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_clang_is_found_unversioned_first_else_the_newest_versioned(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_clangxx() == "clang++"  # none there: the plain name, which version() reports missing
    for name in ("clang++-9", "clang++-14", "clang++-14-extra", "clang-17"):
        _executable(tmp_path, name)
    assert find_clangxx() == "clang++-14"
    _executable(tmp_path, "clang++")
    assert find_clangxx() == "clang++"


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 architecture levels")
def test_clang_links_gccs_openmp_runtime_and_takes_the_gxx_architecture_tokens():
    flags = ClangToolchain(executable="clang++").flags(BuildTarget("cpu_clang", "x86_64_v2"))
    assert "-fopenmp=libgomp" in flags and "-march=x86-64-v2" in flags
    with pytest.raises(UnsupportedTarget, match="clang"):
        ClangToolchain(executable="clang++").flags(BuildTarget("cpu_clang", "sm90"))
