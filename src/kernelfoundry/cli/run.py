"""`kernelfoundry run TASK`: submit through gRPC, follow the run live, print the best kernel.

Starts the embedded stack for the duration of the command when nothing answers at the configured address
(and says which earlier runs that stack resumed). Ctrl-C cancels the run (CancelRun) and waits for it to
end; a second Ctrl-C detaches, saying how to resume or cancel it; SIGTERM detaches at once (stopping an
embedded stack). Exit status: 0 when the run completed with a correct kernel, 1 when it failed or was
cancelled (the reason is printed), 2 for a mistake in the arguments or the task, 130 after Ctrl-C, 143
after SIGTERM.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Protocol

import grpc
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kernelfoundry.api.auth import PLAINTEXT_CLIENT
from kernelfoundry.cli.levels import level_words
from kernelfoundry.cli.output import CliError, fail, rejection, stderr_console, stdout_console
from kernelfoundry.client import KernelFoundryClient, SubmissionRejected
from kernelfoundry.codec import descriptors_from_proto
from kernelfoundry.config import load_settings
from kernelfoundry.domain.descriptors import AXES, CELL_COUNT
from kernelfoundry.tasks.model import TaskError
from kernelfoundry.v1 import run_pb2

EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
BACKENDS = ("cpu", "cuda")


class RunClient(Protocol):
    """What following a run needs from the API (KernelFoundryClient; fakes in tests)."""

    def progress(self, run_id: str) -> Iterator[run_pb2.RunProgress]: ...

    def get_run(self, run_id: str) -> run_pb2.RunProgress: ...

    def cancel(self, run_id: str) -> run_pb2.RunProgress: ...


def check_arguments(iterations: int | None, population: int, backend: str) -> None:
    """Refuse what cannot mean anything: raises CliError(bad_argument) naming the option."""
    if iterations is not None and iterations < 1:
        raise CliError(
            "bad_argument",
            f"--iterations {iterations}: a run needs at least 1 iteration "
            "(leave the option out to use the task's budget)",
        )
    if population < 1:
        raise CliError("bad_argument", f"--population {population}: at least 1 candidate per generation")
    if backend not in BACKENDS:
        raise CliError("bad_argument", f"--backend {backend}: choose cpu or cuda")


def _hardware(backend: str) -> str:
    from kernelfoundry.stack.hardware import cpu_target, cuda_targets

    if backend == "cpu":
        return cpu_target().execute
    targets = cuda_targets()
    if not targets:
        raise CliError("no_gpu", "--backend cuda needs a GPU on this machine (nvidia-smi finds none)")
    return targets[0].execute


def status_name(status: int) -> str:
    return run_pb2.RunStatus.Name(status).removeprefix("RUN_STATUS_").lower()  # type: ignore[arg-type]


def speedup_dict(progress: run_pb2.RunProgress) -> dict[str, Any] | None:
    """The run's one speedup figure with what it was computed from (kernelfoundry.domain.speedup)."""
    if not progress.HasField("speedup"):
        return None
    s = progress.speedup
    return {
        "candidate_id": s.candidate_id,
        "speedup": round(s.speedup, 4),
        "kernel_ms": s.kernel_ms,
        "kernel_spread_ms": s.kernel_spread_ms,
        "eager_ms": s.eager_ms,
        "eager_spread_ms": s.eager_spread_ms,
        "eager_samples": s.eager_samples,
        "eager_outliers_ms": list(s.eager_outliers_ms),
        "retimed": s.retimed,
        "side_by_side_eager_ms": s.side_by_side_eager_ms or None,
        "side_by_side_speedup": round(s.side_by_side_speedup, 4) or None,
        "torch_compile_ms": s.compile_ms or None,
        "speedup_vs_torch_compile": round(s.speedup_vs_compile, 4) or None,
    }


def summary_dict(progress: run_pb2.RunProgress) -> dict[str, object]:
    best = progress.best
    hardware = progress.config.hardware or best.hardware
    words = {axis: level_words(hardware, axis) for axis in AXES}
    return {
        "run_id": progress.run_id,
        "task": progress.task_name,
        "status": status_name(progress.status),
        "iterations": progress.iteration,
        "candidates_generated": progress.candidates_generated,
        "candidates_compiled": progress.candidates_compiled,
        "candidates_correct": progress.candidates_correct,
        "candidates_failed": progress.candidates_failed,
        "best_speedup": round(progress.best_speedup, 4),
        "speedup": speedup_dict(progress),
        "best_candidate_id": best.candidate_id,
        "best_kernel_path": best.path,
        "best_runtime_ms": best.runtime_ms,
        "eager_runtime_ms": best.baseline_ms,
        "torch_compile_runtime_ms": best.compile_baseline_ms or None,
        "best_descriptors": {
            **descriptors_from_proto(best.descriptors).as_dict(),
            "described": {axis: words[axis][getattr(best.descriptors, axis)] for axis in words},
        },
        "archive_cells_filled": len(progress.archive),
        "archive": [
            {
                **descriptors_from_proto(c.descriptors).as_dict(),
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
        "usage": usage_dict(progress),
        "message": progress.message,
    }


def _totals(t: run_pb2.GenerationTotals) -> dict[str, Any]:
    return {
        "requests": t.requests,
        "prompt_tokens": t.prompt_tokens,
        "completion_tokens": t.completion_tokens,
        "cost_usd": t.cost_usd,
    }


def usage_dict(progress: run_pb2.RunProgress) -> dict[str, Any]:
    """The run's generation requests, tokens and cost (USD from the price table), and per generator."""
    return {
        **_totals(progress.usage),
        "by_generator": {name: _totals(t) for name, t in sorted(progress.usage_by_generator.items())},
    }


def usage_line(summary: dict[str, Any]) -> str | None:
    """What the run's generation cost, per generator; None for a run that spent no token."""
    usage = summary["usage"]
    if not usage["prompt_tokens"] and not usage["completion_tokens"]:
        return None

    def spent(t: dict[str, Any]) -> str:
        return (
            f"{t['prompt_tokens']:,} prompt + {t['completion_tokens']:,} completion tokens, "
            f"${t['cost_usd']:.4f} over {t['requests']} request{'' if t['requests'] == 1 else 's'}"
        )

    parts = "; ".join(f"{name}: {spent(t)}" for name, t in usage["by_generator"].items())
    return f"generation: {spent(usage)} ({parts})"


@dataclass(frozen=True)
class Followed:
    """How following a run ended: its last known state, and whether the user interrupted or detached."""

    progress: run_pb2.RunProgress
    interrupted: bool = False
    detached: bool = False


def follow(client: RunClient, run_id: str, console: Console, *, quiet: bool, detach_hint: str) -> Followed:
    """Show the run's progress until it ends. Ctrl-C cancels it; a second Ctrl-C detaches."""
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
    interrupted = False
    with progress_bar:
        bar = progress_bar.add_task("run", total=None, name=run_id, gen=0, comp=0, ok=0, bad=0, best="-")
        while True:
            try:
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
                break
            except KeyboardInterrupt:
                if interrupted:
                    return _detach(client, run_id, console, final, detach_hint)
                interrupted = True
                console.print(
                    f"Ctrl-C: cancelling run {run_id} (Ctrl-C again to detach and leave it running)"
                )
                try:
                    final = client.cancel(run_id)
                except KeyboardInterrupt:
                    return _detach(client, run_id, console, final, detach_hint)
                except grpc.RpcError as exc:
                    console.print(f"could not cancel run {run_id}: {exc.details()}", markup=False)
                if final is not None and final.status != run_pb2.RUN_STATUS_RUNNING:
                    break
    return Followed(final if final is not None else client.get_run(run_id), interrupted)


def _detach(
    client: RunClient, run_id: str, console: Console, last: run_pb2.RunProgress | None, hint: str
) -> Followed:
    console.print(f"detached from run {run_id}: {hint}", markup=False, highlight=False)
    return Followed(last or run_pb2.RunProgress(run_id=run_id), interrupted=True, detached=True)


def detach_hint(run_id: str, embedded: bool) -> str:
    """How to get back to a run this command leaves behind."""
    if embedded:
        return (
            "the embedded stack stops with this command and the run stays open: the next "
            f"`kernelfoundry up` or `kernelfoundry run` resumes it; `kernelfoundry cancel {run_id}` ends it "
            "while a stack is up"
        )
    return (
        f"it keeps running; `kernelfoundry cancel {run_id}` ends it, "
        "`kernelfoundry lineage runs --status running` lists open runs"
    )


@contextmanager
def signals_taken() -> Iterator[None]:
    """Ctrl-C (SIGINT) raises KeyboardInterrupt even when a shell started us with SIGINT ignored, and
    SIGTERM exits through the same clean-up (an embedded stack's services live in their own sessions and
    would outlive a killed command). The previous handlers come back afterwards."""

    def terminate(signum: int, frame: object) -> None:
        raise SystemExit(EXIT_TERMINATED)

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run(
    task: Annotated[Path, typer.Argument(help="KernelBench .py file or task folder")],
    iterations: Annotated[
        int | None, typer.Option(help="Generations to evolve, at least 1 (default: the task's budget)")
    ] = None,
    backend: Annotated[str, typer.Option(help="cpu or cuda")] = "cpu",
    population: Annotated[int, typer.Option(help="Generation requests per iteration (at least 1)")] = 4,
    sweeps: Annotated[bool, typer.Option(help="Sweep the tunables of new elites")] = True,
    seed: Annotated[int, typer.Option(help="Random seed of the search")] = 0,
    json_output: Annotated[
        bool, typer.Option("--json", help="Print one machine-readable summary (errors as JSON too)")
    ] = False,
    address: Annotated[str | None, typer.Option(help="gRPC API address (default: KF_GRPC_ADDRESS)")] = None,
    state_dir: Annotated[Path | None, typer.Option(help="State folder of the embedded stack")] = None,
) -> None:
    """Evolve kernels for TASK and print the best one's path and its speedup over PyTorch eager."""
    with signals_taken():
        _run(task, iterations, backend, population, sweeps, seed, json_output, address, state_dir)


def _run(
    task: Path,
    iterations: int | None,
    backend: str,
    population: int,
    sweeps: bool,
    seed: int,
    json_output: bool,
    address: str | None,
    state_dir: Path | None,
) -> None:
    console = stderr_console()
    settings = load_settings(grpc_address=address, state_dir=state_dir)
    try:
        check_arguments(iterations, population, backend)
        loaded = _load(task, backend)
        config = run_pb2.RunConfig(
            hardware=_hardware(backend),
            generator=settings.generator,
            iterations=iterations or 0,
            population=population,
            sweeps=sweeps,
            seed=seed,
        )
    except CliError as error:
        raise fail(error, json_output) from None
    with ExitStack() as cleanup:
        client = KernelFoundryClient(settings.grpc_address)
        cleanup.callback(client.close)
        embedded = not client.ready(1.0)
        if embedded:
            from kernelfoundry.cli.resumed import announce_resumed
            from kernelfoundry.stack.supervisor import Stack

            stack = Stack(state_dir=settings.state_dir)
            cleanup.callback(stack.stop)
            try:
                with console.status("no KernelFoundry answers; starting the embedded stack..."):
                    stack.start()
            except KeyboardInterrupt:
                error = CliError("interrupted", "interrupted while the stack started", EXIT_INTERRUPTED)
                raise fail(error, json_output) from None
            client.close()
            client = KernelFoundryClient(stack.grpc_address, PLAINTEXT_CLIENT)  # local: no token
            cleanup.callback(client.close)
            announce_resumed(console, stack.store_grpc_address)
        try:
            with console.status("validating the task..."):
                run_id = client.submit(loaded, config)
        except SubmissionRejected as exc:
            raise fail(rejection(str(exc)), json_output) from None
        except KeyboardInterrupt:
            raise fail(
                CliError("interrupted", "interrupted before the run started", 130), json_output
            ) from None
        followed = follow(
            client, run_id, console, quiet=json_output, detach_hint=detach_hint(run_id, embedded)
        )
    conclude(followed, run_id, console, json_output)


def conclude(followed: Followed, run_id: str, console: Console, json_output: bool, **extra: object) -> None:
    """How a followed run ended, for `run` and `resume` alike: its summary (or one JSON document, with
    `extra` fields), then the exit status: 130 after Ctrl-C, 1 when the run did not complete."""
    summary = summary_dict(followed.progress)
    summary.update(extra)
    if followed.detached:
        summary["detached"] = True
    if json_output:
        sys.stdout.write(json.dumps(summary, indent=2) + "\n")
    elif not followed.detached:
        print_summary(stdout_console(), summary, followed.progress)
    if followed.interrupted:
        raise typer.Exit(EXIT_INTERRUPTED)
    if summary["status"] != "completed":
        if not json_output:
            console.print(f"run {run_id} {summary['status']}: {summary['message']}", markup=False)
        raise typer.Exit(1)


def _load(task: Path, backend: str):  # type: ignore[no-untyped-def]
    from kernelfoundry.tasks.loading import load_task
    from kernelfoundry.tasks.shapes import shapes_for_backend

    try:
        return shapes_for_backend(load_task(task), backend)
    except TaskError as exc:
        raise CliError(exc.reason, exc.message) from exc


def archive_map(progress: run_pb2.RunProgress) -> Table:
    """The archive as one table: the first axis's levels as rows (memory), the second's as columns
    (algorithm), one line per filled cell naming its remaining levels (parallelism), in the words of
    the run's backend."""
    hardware = progress.config.hardware or progress.best.hardware
    words = {axis: level_words(hardware, axis) for axis in AXES}
    rows, columns, *rest = AXES
    cells: dict[tuple[int, int], list[str]] = {}
    for cell in progress.archive:
        d = descriptors_from_proto(cell.descriptors).as_dict()
        named = " / ".join(words[axis][d[axis]] for axis in rest)
        cells.setdefault((d[rows], d[columns]), []).append(f"{named}: {cell.speedup:.2f}x")
    filled = f"{len(progress.archive)}/{CELL_COUNT} cells filled"
    table = Table(title=f"archive: {filled} (elite speedup over eager)")
    table.add_column(f"{rows} \\ {columns}")
    for name in words[columns]:
        table.add_column(name)
    for r, row_name in enumerate(words[rows]):
        table.add_row(row_name, *("\n".join(cells.get((r, c), ["·"])) for c in range(len(words[columns]))))
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


def speedup_lines(summary: dict[str, Any]) -> list[str]:
    """The headline: the run's one figure, the kernel's and eager's times with their spreads."""
    figure = summary["speedup"]
    if figure is None:
        return []
    outliers = figure["eager_outliers_ms"]
    outlier_text = (
        f"; {len(outliers)} outlier(s) left out: " + ", ".join(f"{v:.3f}" for v in outliers) + " ms"
        if outliers
        else ""
    )
    how = "re-timed beside eager" if figure["retimed"] else "its own evaluation"
    lines = [
        f"speedup over PyTorch eager: {figure['speedup']:.2f}x "
        f"(kernel {figure['kernel_ms']:.4f} ms, IQR {figure['kernel_spread_ms']:.4f}, {how}; "
        f"eager {figure['eager_ms']:.4f} ms, median of {figure['eager_samples']} timings, "
        f"IQR {figure['eager_spread_ms']:.4f}{outlier_text})"
    ]
    if figure["retimed"] and figure["side_by_side_eager_ms"]:
        side = (
            f"side by side: eager {figure['side_by_side_eager_ms']:.4f} ms "
            f"({figure['side_by_side_speedup']:.2f}x)"
        )
        if figure["torch_compile_ms"]:
            side += (
                f", torch.compile {figure['torch_compile_ms']:.4f} ms "
                f"({figure['speedup_vs_torch_compile']:.2f}x)"
            )
        lines.append(side)
    return lines


def print_summary(out: Console, summary: dict[str, Any], final: run_pb2.RunProgress) -> None:
    if final.archive:
        out.print(archive_map(final))
    if len(final.tuned) > 1:  # one shape: the best kernel below says it all
        out.print(tuned_table(final))
    spent = usage_line(summary)
    if not summary["best_candidate_id"]:
        out.print(
            f"run {summary['run_id']} {summary['status']}: no correct kernel found ({summary['message']})",
            markup=False,
        )
        if spent:
            out.print(spent, markup=False, highlight=False)
        return
    lines = [f"best kernel: {summary['best_kernel_path']} (candidate {summary['best_candidate_id']})"]
    lines += speedup_lines(summary)
    iterations = summary["iterations"]
    lines.append(
        f"after {iterations} iteration{'' if iterations == 1 else 's'}, {summary['candidates_correct']} "
        f"correct of {summary['candidates_generated']} candidates"
    )
    if spent:
        lines.append(spent)
    out.print("\n".join(lines), markup=False, highlight=False)
