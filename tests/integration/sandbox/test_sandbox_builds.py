"""The compiler's sandbox keeps service secrets out of builds (a build log quotes whatever the compiler
printed, and toolchains keep growing ways to read files and the environment)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelfoundry.toolchains.sandbox import Limits, build_environment, run_sandboxed


def test_build_environment_drops_secrets_and_keeps_the_toolchain_settings() -> None:
    parent = {"PATH": "/usr/bin", "KF_STORE_URI": "mongodb://u:p@h", "GH_TOKEN": "t", "CXX": "g++"}
    assert build_environment(parent) == {"PATH": "/usr/bin", "CXX": "g++", "LC_ALL": "C"}


def test_a_build_command_sees_no_service_secret(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KF_BUILD_SECRET", "build-secret-4711")
    outcome = run_sandboxed(
        ["sh", "-c", "cat /proc/self/environ | tr '\\0' '\\n'"], tmp_path, Limits(wall_s=60)
    )
    assert outcome.returncode == 0, outcome.output
    assert "PATH=" in outcome.output and "LC_ALL=C" in outcome.output
    assert "build-secret-4711" not in outcome.output and "KF_BUILD_SECRET" not in outcome.output
