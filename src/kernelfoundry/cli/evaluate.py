"""`kernelfoundry evaluate TASK KERNEL_SOURCE`: build one kernel and evaluate it on this machine.

Wiring only: loads the task (kernelfoundry.tasks.loading), builds the source (kernelfoundry.toolchains)
and evaluates the artifact in a crash-isolated child (kernelfoundry.evaluation). A compile error is a
report with compiled=false, never an exception. Exit status: 0 when the kernel is correct, 1 otherwise,
2 for a mistake in the arguments (printed as JSON with --json).

A run's saved best kernel (`.kf/runs/<run>/best.cpp`) carries the -D values its build passed as #defines
at its top; `best.manifest.json` beside it names the entry point and the glue file, and is applied here
unless --entry-point or --glue say otherwise, so the unit built here is the unit the run measured.
"""

from __future__ import annotations

import json
import platform
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer

from kernelfoundry.cli.output import CliError, fail
from kernelfoundry.domain.kernel import DEFAULT_ENTRY_POINT, KernelSource
from kernelfoundry.evaluation import EvaluationReport, EvaluationRequest, EvaluationSettings, evaluate_once
from kernelfoundry.tasks.model import TaskError

LANGUAGE_BY_SUFFIX = {".cpp": "cpp", ".cc": "cpp", ".cxx": "cpp", ".cu": "cuda"}
BACKEND_BY_LANGUAGE = {"cpp": "cpu", "cuda": "cuda"}
MANIFEST_SUFFIX = ".manifest.json"


@dataclass(frozen=True)
class BuildManifest:
    """What a run wrote beside its best kernel (services/evolver/runs.py build_manifest)."""

    path: Path
    entry_point: str
    glue_path: Path | None
    backend: str
    defines: dict[str, str]


def manifest_for(kernel_path: Path) -> BuildManifest | None:
    """The build manifest beside a kernel source (`best.cpp` -> `best.manifest.json`), if there is one.

    Raises CliError(bad_manifest) naming the file when it is there but unreadable.
    """
    path = kernel_path.with_name(kernel_path.stem + MANIFEST_SUFFIX)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
        glue = str(data.get("glue_file") or "")
        return BuildManifest(
            path=path,
            entry_point=str(data.get("entry_point") or DEFAULT_ENTRY_POINT),
            glue_path=path.parent / Path(glue).name if glue else None,
            backend=str(data.get("backend") or ""),
            defines={str(k): str(v) for k, v in dict(data.get("defines") or {}).items()},
        )
    except (OSError, ValueError, TypeError, AttributeError) as exc:
        raise CliError("bad_manifest", f"{path} is not a readable build manifest: {exc}") from exc


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


def executor_settings(
    backend: str,
    device: str | None,
    timed_runs: int | None,
    deadline: float | None,
    torch_compile: bool | None,
) -> EvaluationSettings:
    """The settings an executor on this machine would use (KF_* variables), with the options applied on
    top: a kernel evaluated here is timed the way a run timed it."""
    from dataclasses import replace

    from kernelfoundry.config import load_settings
    from kernelfoundry.services.executor.main import evaluation_settings

    base = evaluation_settings(load_settings(), device or ("cuda:0" if backend == "cuda" else "cpu"))
    changes: dict[str, Any] = {}
    if timed_runs is not None:
        changes["timed_runs"] = timed_runs
    if deadline is not None:
        changes["deadline_s"] = deadline
    if torch_compile is not None:
        changes["measure_torch_compile"] = torch_compile
    return replace(base, **changes)


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
    glue: Annotated[
        Path | None, typer.Option(help="Python glue defining ModelNew (default: the manifest's, if any)")
    ] = None,
    entry_point: Annotated[
        str | None, typer.Option(help=f"Entry point the unit exports (default: {DEFAULT_ENTRY_POINT})")
    ] = None,
    device: Annotated[str | None, typer.Option(help="cpu or cuda:N (default: cpu / cuda:0)")] = None,
    arch: Annotated[str | None, typer.Option(help="Architecture token (default: this machine's)")] = None,
    timed_runs: Annotated[int | None, typer.Option(help="Timed runs (default: 100 cuda, 30 cpu)")] = None,
    deadline: Annotated[
        float | None, typer.Option(help="Seconds before the evaluation is killed (default: the executor's)")
    ] = None,
    torch_compile: Annotated[
        bool | None, typer.Option(help="Time torch.compile too (default: cuda only)")
    ] = None,
) -> None:
    """Build KERNEL_SOURCE and evaluate it against TASK: correctness, anti-cheat checks, timing."""
    try:
        if backend not in BACKEND_BY_LANGUAGE.values():
            raise CliError("bad_argument", f"--backend {backend}: choose cpu or cuda")
        if not kernel_source.is_file():
            raise CliError("not_found", f"no kernel source at {kernel_source}")
        if glue is not None and not glue.is_file():
            raise CliError("not_found", f"no glue file at {glue}")
        if timed_runs is not None and timed_runs < 1:
            raise CliError("bad_argument", f"--timed-runs {timed_runs}: at least 1 timed run")
        if deadline is not None and deadline <= 0:
            raise CliError("bad_argument", f"--deadline {deadline}: a positive number of seconds")
        manifest = manifest_for(kernel_source)
    except CliError as error:
        raise fail(error, json_output) from None
    if manifest is not None:
        glue = glue if glue is not None else manifest.glue_path
        entry_point = entry_point or manifest.entry_point
    settings = executor_settings(backend, device, timed_runs, deadline, torch_compile)
    report = build_and_evaluate(
        task,
        kernel_source,
        backend,
        device=device,
        glue_path=glue,
        entry_point=entry_point or DEFAULT_ENTRY_POINT,
        arch=arch,
        settings=settings,
    )
    if json_output:
        document = summary(report)
        document["manifest"] = str(manifest.path) if manifest is not None else None
        typer.echo(json.dumps(document, indent=2))
    else:
        print_table(report)
    if not report.correct:
        raise typer.Exit(code=1)
