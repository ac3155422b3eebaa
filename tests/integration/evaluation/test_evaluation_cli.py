"""`kernelfoundry evaluate`: builds through the toolchain, evaluates, prints JSON or a table."""

from __future__ import annotations

import json

import typer
from evaluation_fixtures import CPU_UNITS, FIXTURES
from typer.testing import CliRunner

from kernelfoundry.cli.evaluate import evaluate

TASK = str(FIXTURES / "tasks" / "fused_mul_add.py")


def app() -> typer.Typer:
    cli = typer.Typer()
    cli.command()(evaluate)
    return cli


def test_json_output_of_a_correct_kernel() -> None:
    result = CliRunner().invoke(app(), [TASK, str(CPU_UNITS / "good_fma.cpp"), "--json", "--timed-runs", "5"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["compiled"] and data["correct"] and data["error"] is None
    assert data["runtime_ms"] > 0 and data["baseline_ms"] > 0 and data["speedup"] > 0
    assert data["max_abs_error"] < 1e-4


def test_compile_error_is_a_failed_report_not_a_crash() -> None:
    result = CliRunner().invoke(app(), [TASK, str(CPU_UNITS / "syntax_error.cpp"), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["compiled"] is False and data["reason"] == "compile_error"
    assert "expected" in data["error"]
    assert data["speedup"] is None


def test_human_output_names_the_reason() -> None:
    result = CliRunner().invoke(app(), [TASK, str(CPU_UNITS / "wrong_sign.cpp"), "--timed-runs", "5"])
    assert result.exit_code == 1
    assert "wrong_result" in result.output


def test_backend_must_match_the_source_language() -> None:
    result = CliRunner().invoke(app(), [TASK, str(CPU_UNITS / "good_fma.cpp"), "--backend", "cuda", "--json"])
    assert json.loads(result.output)["reason"] == "language_mismatch"
