"""`kernelfoundry evaluate TASK KERNEL_SOURCE`: build one kernel and evaluate it on this machine.

Wiring only: loads the task (kernelfoundry.tasks.loading), builds the source (kernelfoundry.toolchains)
and evaluates the artifact in a crash-isolated child (kernelfoundry.evaluation). A compile error is a
report with compiled=false, never an exception. Exit status: 0 when the kernel is correct, 1 otherwise.
"""

from __future__ import annotations

import json
import platform
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer

from kernelfoundry.domain.kernel import DEFAULT_ENTRY_POINT, KernelSource
from kernelfoundry.evaluation import EvaluationReport, EvaluationRequest, EvaluationSettings, evaluate_once
from kernelfoundry.tasks.model import TaskError

LANGUAGE_BY_SUFFIX = {".cpp": "cpp", ".cc": "cpp", ".cxx": "cpp", ".cu": "cuda"}
BACKEND_BY_LANGUAGE = {"cpp": "cpu", "cuda": "cuda"}


def default_arch(backend: str) -> str:
    """The architecture token of this machine: x86_64/aarch64 for CPU, smXY of GPU 0 for CUDA."""
    if backend == "cpu":
        return platform.machine() or "x86_64"
    from kernelfoundry.toolchains.probe import tool_output

    text = tool_output("nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader") or ""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return f"sm{first.replace('.', '')}" if first.replace(".", "").isdigit() else "sm90"


def build_and_evaluate(
    task_path: Path,
    kernel_path: Path,
    backend: str,
    *,
    device: str | None = None,
    glue_path: Path | None = None,
    entry_point: str = DEFAULT_ENTRY_POINT,
    arch: str | None = None,
    settings: EvaluationSettings | None = None,
) -> EvaluationReport:
    """The command's work, callable from Python: never raises for a bad task or kernel."""
    from kernelfoundry.tasks.loading import load_task
    from kernelfoundry.tasks.shapes import shapes_for_backend
    from kernelfoundry.toolchains import BuildTarget, build

    try:
        task = shapes_for_backend(load_task(task_path), backend)
    except TaskError as exc:
        return EvaluationReport.failure(exc.reason, exc.message, compiled=False)
    language = LANGUAGE_BY_SUFFIX.get(kernel_path.suffix)
    if language is None or BACKEND_BY_LANGUAGE[language] != backend:
        return EvaluationReport.failure(
            "language_mismatch",
            f"{kernel_path.name} is not a {backend} source (.cpp/.cc/.cxx for cpu, .cu for cuda)",
            compiled=False,
        )
    glue = glue_path.read_text() if glue_path is not None else ""
    source = KernelSource(language, kernel_path.read_text(), entry_point=entry_point, glue=glue)  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory(prefix="kf-evaluate-") as out_dir:
        built = build(
            source, BuildTarget(backend, arch or default_arch(backend)), None, out_dir=Path(out_dir)
        )  # type: ignore[arg-type]
        if not built.ok or built.artifact is None:
            return EvaluationReport.failure(built.reason or "compile_error", built.log, compiled=False)
        request = EvaluationRequest(
            task=task,
            kernel=source,
            artifact=built.artifact,
            device=device or ("cuda:0" if backend == "cuda" else "cpu"),
            settings=settings or EvaluationSettings(),
        )
        return evaluate_once(request)


def summary(report: EvaluationReport) -> dict[str, Any]:
    """What --json prints: the headline fields, then the full report."""
    return {
        "compiled": report.compiled,
        "correct": report.correct,
        "reason": report.reason,
        "error": report.message if not report.correct else None,
        "max_abs_error": report.max_abs_error,
        "runtime_ms": report.runtime_ms,
        "baseline_ms": report.baseline_ms,
        "compile_baseline_ms": report.compile_baseline_ms,
        "speedup": report.speedup,
        "report": report.to_dict(),
    }


def _fmt(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.4g}{unit}"


def print_table(report: EvaluationReport) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="evaluation", show_header=False)
    verdict = "[green]correct[/green]" if report.correct else f"[red]{report.reason}[/red]"
    rows = [
        ("compiled", str(report.compiled)),
        ("result", verdict),
        ("device", f"{report.device} {report.device_name}".strip()),
        ("max abs error", _fmt(report.max_abs_error)),
        ("precision", report.precision or "-"),
        (
            "runtime (median)",
            _fmt(report.runtime_ms, " ms") + f" (IQR {_fmt(report.runtime_spread_ms, ' ms')})",
        ),
        ("eager", _fmt(report.baseline_ms, " ms")),
        ("torch.compile", _fmt(report.compile_baseline_ms, " ms")),
        ("speedup", _fmt(report.speedup, "x")),
    ]
    if not report.correct:
        rows.append(("error", report.message[:2000]))
    for name, value in rows:
        table.add_row(name, value)
    Console().print(table)


def evaluate(
    task: Annotated[Path, typer.Argument(help="Task: KernelBench .py file, task folder or .kf file")],
    kernel_source: Annotated[Path, typer.Argument(help="Kernel source: .cpp (cpu) or .cu (cuda)")],
    backend: Annotated[str, typer.Option(help="cpu | cuda")] = "cpu",
    json_output: Annotated[bool, typer.Option("--json", help="Print the report as JSON")] = False,
    glue: Annotated[Path | None, typer.Option(help="Python glue defining ModelNew")] = None,
    entry_point: Annotated[str, typer.Option(help="Entry point the unit exports")] = DEFAULT_ENTRY_POINT,
    device: Annotated[str | None, typer.Option(help="cpu or cuda:N (default: cpu / cuda:0)")] = None,
    arch: Annotated[str | None, typer.Option(help="Architecture token (default: this machine's)")] = None,
    timed_runs: Annotated[int | None, typer.Option(help="Timed runs (default: 100 cuda, 30 cpu)")] = None,
    deadline: Annotated[float, typer.Option(help="Seconds before the evaluation is killed")] = 300.0,
    torch_compile: Annotated[
        bool | None, typer.Option(help="Time torch.compile too (default: cuda only)")
    ] = None,
) -> None:
    """Build KERNEL_SOURCE and evaluate it against TASK: correctness, anti-cheat checks, timing."""
    if backend not in BACKEND_BY_LANGUAGE.values():
        raise typer.BadParameter(f"unknown backend {backend!r}: choose cpu or cuda")
    settings = EvaluationSettings(
        timed_runs=timed_runs, deadline_s=deadline, measure_torch_compile=torch_compile
    )
    report = build_and_evaluate(
        task,
        kernel_source,
        backend,
        device=device,
        glue_path=glue,
        entry_point=entry_point,
        arch=arch,
        settings=settings,
    )
    if json_output:
        typer.echo(json.dumps(summary(report), indent=2))
    else:
        print_table(report)
    if not report.correct:
        raise typer.Exit(code=1)
