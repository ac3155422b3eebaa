"""A policy may leave named protections out (a GPU host whose driver fails under them); what is left out
is absent from `protections`, the rest still applies, and `require` still refuses."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelfoundry.sandbox import SandboxError, SandboxPolicy, spawn_sandboxed
from kernelfoundry.sandbox.gpu_probe import LADDER


def _protections(tmp_path: Path, relax: tuple[str, ...]) -> list[str]:
    policy = SandboxPolicy.for_python(tmp_path, relax=relax)
    process = spawn_sandboxed([sys.executable, "-c", "pass"], policy, stdout=subprocess.DEVNULL)
    try:
        assert process.wait(60) == 0
    finally:
        process.kill_all()
    return list(process.protections)


def test_left_out_protections_are_absent_and_the_others_stay(tmp_path: Path) -> None:
    strict = _protections(tmp_path, ())
    relaxed = _protections(tmp_path, ("userns", "landlock", "rlimits"))
    assert "rlimits" in strict and "rlimits" not in relaxed
    assert not any(name.startswith("landlock") for name in relaxed)
    assert "userns" not in relaxed
    assert "env" in relaxed and "session" in relaxed
    if "userns" in strict and os.geteuid() == 0:
        assert "netns" in relaxed  # root keeps a network namespace of its own without a user namespace


def test_a_required_protection_that_is_left_out_refuses_to_run(tmp_path: Path) -> None:
    policy = SandboxPolicy.for_python(tmp_path, relax=("rlimits",), require=("rlimits",))
    with pytest.raises(SandboxError) as caught:
        spawn_sandboxed([sys.executable, "-c", "pass"], policy)
    assert caught.value.reason == "sandbox_unavailable"


def test_an_unknown_protection_name_is_a_bad_policy(tmp_path: Path) -> None:
    with pytest.raises(SandboxError) as caught:
        SandboxPolicy.for_python(tmp_path, relax=("seccomp",))
    assert caught.value.reason == "bad_policy"


def test_the_gpu_ladder_starts_strict_and_only_grows() -> None:
    assert LADDER[0] == ()
    for weaker, stronger in zip(LADDER[1:], LADDER[:-1], strict=True):
        assert len(weaker) >= len(stronger)
