"""`kernelfoundry run TASK`: submit through gRPC, follow the run live, print the best kernel.

Starts the embedded stack for the duration of the command when nothing answers at the configured address.
"""

from __future__ import annotations

import json
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kernelfoundry.client import KernelFoundryClient, SubmissionRejected
from kernelfoundry.config import load_settings
from kernelfoundry.tasks.loading import load_task
from kernelfoundry.tasks.model import TaskError
from kernelfoundry.tasks.shapes import shapes_for_backend
from kernelfoundry.v1 import run_pb2


def _hardware(backend: str) -> str:
    from kernelfoundry.stack.hardware import cpu_target, cuda_targets

    if backend == "cpu":
        return cpu_target().execute
    targets = cuda_targets()
    if not targets:
        raise typer.BadParameter("--backend cuda needs a GPU on this machine (nvidia-smi finds none)")
    return targets[0].execute


def summary_dict(progress: run_pb2.RunProgress) -> dict[str, object]:
    best = progress.best
    return {
        "run_id": progress.run_id,
        "task": progress.task_name,
        "status": run_pb2.RunStatus.Name(progress.status).removeprefix("RUN_STATUS_").lower(),
        "iterations": progress.iteration,
        "candidates_generated": progress.candidates_generated,
        "candidates_compiled": progress.candidates_compiled,
        "candidates_correct": progress.candidates_correct,
        "candidates_failed": progress.candidates_failed,
        "best_speedup": round(progress.best_speedup, 4),
        "best_candidate_id": best.candidate_id,
        "best_kernel_path": best.path,
        "best_runtime_ms": best.runtime_ms,
        "eager_runtime_ms": best.baseline_ms,
        "torch_compile_runtime_ms": best.compile_baseline_ms or None,
        "best_descriptors": {
            "memory": best.descriptors.memory,
            "algorithm": best.descriptors.algorithm,
            "parallelism": best.descriptors.parallelism,
        },
        "archive_cells_filled": len(progress.archive),
        "archive": [
            {
                "memory": c.descriptors.memory,
                "algorithm": c.descriptors.algorithm,
                "parallelism": c.descriptors.parallelism,
                "candidate_id": c.candidate_id,
                "speedup": round(c.speedup, 4),
            }
            for c in progress.archive
        ],
        "outcomes": {
            "improvement": progress.outcomes.improvement,
            "neutral": progress.outcomes.neutral,
            "regression": progress.outcomes.regression,
            "new_cell": progress.outcomes.new_cell,
            "elite_replaced": progress.outcomes.elite_replaced,
            "failed": dict(progress.outcomes.failed),
        },
        "tuned_per_shape": [
            {
                "shape": t.shape,
                "candidate_id": t.candidate_id,
                "params": dict(t.params),
                "runtime_ms": t.runtime_ms,
                "hardware": t.hardware,
            }
            for t in progress.tuned
        ],
        "elapsed_s": round(progress.elapsed_s, 2),
        "message": progress.message,
    }


def run(
    task: Annotated[Path, typer.Argument(help="KernelBench .py file or task folder")],
    iterations: Annotated[
        int | None, typer.Option(help="Generations to evolve (default: the task's budget)")
    ] = None,
    backend: Annotated[str, typer.Option(help="cpu or cuda")] = "cpu",
    population: Annotated[int, typer.Option(help="Generation requests per iteration")] = 4,
    sweeps: Annotated[bool, typer.Option(help="Sweep the tunables of new elites")] = True,
    seed: Annotated[int, typer.Option(help="Random seed of the search")] = 0,
    json_output: Annotated[bool, typer.Option("--json", help="Print one machine-readable summary")] = False,
    address: Annotated[str | None, typer.Option(help="gRPC API address (default: KF_GRPC_ADDRESS)")] = None,
    state_dir: Annotated[Path | None, typer.Option(help="State folder of the embedded stack")] = None,
) -> None:
    """Evolve kernels for TASK and print the best one's path and its speedup over PyTorch eager."""
    console = Console(stderr=True)
    if backend not in ("cpu", "cuda"):
        raise typer.BadParameter("--backend must be cpu or cuda")
    try:
        loaded = shapes_for_backend(load_task(task), backend)
    except TaskError as exc:
        console.print(f"[red]task rejected[/red] ({exc.reason}): {exc.message}")
        raise typer.Exit(2) from exc
    settings = load_settings(grpc_address=address, state_dir=state_dir)
    config = run_pb2.RunConfig(
        hardware=_hardware(backend),
        generator=settings.generator,
        iterations=iterations or 0,
        population=population,
        sweeps=sweeps,
        seed=seed,
    )
    with ExitStack() as cleanup:
        client = KernelFoundryClient(settings.grpc_address)
        cleanup.callback(client.close)
        if not client.ready(1.0):
            from kernelfoundry.stack.supervisor import Stack

            stack = Stack(state_dir=settings.state_dir)
            with console.status("no KernelFoundry answers; starting the embedded stack..."):
                stack.start()
            cleanup.callback(stack.stop)
            client.close()
            client = KernelFoundryClient(stack.grpc_address)
            cleanup.callback(client.close)
        try:
            with console.status("validating the task..."):
                run_id = client.submit(loaded, config)
        except SubmissionRejected as exc:
            console.print(f"[red]task rejected[/red]: {exc}")
            raise typer.Exit(2) from exc
        final = _follow(client, run_id, console, quiet=json_output)
    summary = summary_dict(final)
    if json_output:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    else:
        _print_summary(console, summary, final)
    if summary["status"] != "completed":
        raise typer.Exit(1)


def _follow(client: KernelFoundryClient, run_id: str, console: Console, quiet: bool) -> run_pb2.RunProgress:
    progress_bar = Progress(
        TextColumn("[bold]{task.fields[name]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("gen'd {task.fields[gen]} · compiled {task.fields[comp]} · correct {task.fields[ok]}"),
        TextColumn("· failed {task.fields[bad]} · best [green]{task.fields[best]}"),
        TimeElapsedColumn(),
        console=console,
        disable=quiet,
    )
    final: run_pb2.RunProgress | None = None
    with progress_bar:
        bar = progress_bar.add_task("run", total=None, name=run_id, gen=0, comp=0, ok=0, bad=0, best="-")
        for update in client.progress(run_id):
            final = update
            progress_bar.update(
                bar,
                total=update.iterations or None,
                completed=update.iteration,
                name=update.task_name,
                gen=update.candidates_generated,
                comp=update.candidates_compiled,
                ok=update.candidates_correct,
                bad=update.candidates_failed,
                best=f"{update.best_speedup:.2f}x" if update.best_speedup else "-",
            )
    return final if final is not None else client.get_run(run_id)


MEMORY_LEVELS = ("scalar", "coalesced", "tiled", "hierarchy")
ALGORITHM_LEVELS = ("direct", "fused", "reformulated", "asymptotic")
PARALLELISM_LEVELS = ("no sync", "barriers", "warp", "atomics")


def archive_map(progress: run_pb2.RunProgress) -> Table:
    """The 4x4x4 archive as one table: memory rows x algorithm columns, one line per parallelism level."""
    cells: dict[tuple[int, int], list[str]] = {}
    for cell in progress.archive:
        d = cell.descriptors
        cells.setdefault((d.memory, d.algorithm), []).append(
            f"{PARALLELISM_LEVELS[d.parallelism]}: {cell.speedup:.2f}x"
        )
    table = Table(title=f"archive: {len(progress.archive)}/64 cells filled (elite speedup over eager)")
    table.add_column("memory \\ algorithm")
    for name in ALGORITHM_LEVELS:
        table.add_column(name)
    for m, memory in enumerate(MEMORY_LEVELS):
        table.add_row(memory, *("\n".join(cells.get((m, a), ["·"])) for a in range(len(ALGORITHM_LEVELS))))
    return table


def tuned_table(progress: run_pb2.RunProgress) -> Table:
    """Per input shape: the fastest kernel and tunable setting found (the setting to build it with)."""
    table = Table(title="best setting per input shape")
    for name in ("shape", "kernel", "setting", "ms"):
        table.add_column(name)
    for t in progress.tuned:
        setting = " ".join(f"{k}={v}" for k, v in sorted(t.params.items())) or "-"
        table.add_row(t.shape, t.candidate_id, setting, f"{t.runtime_ms:.4f}")
    return table


def _print_summary(console: Console, summary: dict[str, object], final: run_pb2.RunProgress) -> None:
    out = Console()
    if final.archive:
        out.print(archive_map(final))
    if len(final.tuned) > 1:  # one shape: the best kernel below says it all
        out.print(tuned_table(final))
    if not summary["best_candidate_id"]:
        out.print(
            f"run {summary['run_id']} {summary['status']}: no correct kernel found ({summary['message']})"
        )
        return
    out.print(
        f"best kernel: {summary['best_kernel_path']}\n"
        f"speedup over PyTorch eager: {summary['best_speedup']:.2f}x "
        f"({summary['best_runtime_ms']:.4f} ms vs {summary['eager_runtime_ms']:.4f} ms) "
        f"after {summary['iterations']} iterations, {summary['candidates_correct']} correct of "
        f"{summary['candidates_generated']} candidates"
    )
