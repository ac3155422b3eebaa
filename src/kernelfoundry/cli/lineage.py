"""`kernelfoundry lineage …`: query the store's lineage API from the command line.

A thin client of LineageService (served by the store at `KF_STORE_GRPC_ADDRESS`): each subcommand makes
one or two RPCs through `LineageClient`, turns the answer into a plain JSON document, and prints either
that document (`--json`, one document on stdout) or rich tables. Errors a user can cause end in a one-line
message and an exit code, never a traceback: an unreachable API or a corrupt archive exits 2, an unknown
run or candidate exits 1. This module must never open the lineage database itself; everything goes
through the API, so it works the same against a local SQLite store and a cluster's MongoDB.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import UTC
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import grpc
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from kernelfoundry.cli.output import CliError, fail, stdout_console
from kernelfoundry.client import LineageClient
from kernelfoundry.config import load_settings
from kernelfoundry.domain.speedup import Measurement, run_speedup
from kernelfoundry.v1 import lineage_pb2

lineage_app = typer.Typer(
    name="lineage",
    help="Query the lineage store: runs, trees, best kernels, failures, usage; export and import runs.",
    no_args_is_help=True,
    add_completion=False,
)

QUERY_TIMEOUT_S = 60.0
TRANSFER_TIMEOUT_S = 600.0

T = TypeVar("T")
Document = dict[str, Any]

AddressOption = Annotated[
    str | None, typer.Option(help="Lineage API of the store (default: KF_STORE_GRPC_ADDRESS)")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one machine-readable JSON document")]


class GroupBy(StrEnum):
    generator = "generator"
    run = "run"


# ---- talking to the API ----


def _address(address: str | None) -> str:
    return address or load_settings().store_grpc_address


def _fail(message: str, code: int, json_output: bool = False, reason: str = "lineage_error") -> typer.Exit:
    """The message alone on stderr, or `{"error": {"reason", "message"}}` on stdout with --json."""
    if json_output:
        return fail(CliError(reason, message, code), json_output)
    Console(stderr=True, soft_wrap=True).print(message, markup=False, highlight=False)
    return typer.Exit(code)


def _call(
    address: str,
    work: Callable[[LineageClient], Awaitable[T]],
    *,
    not_found: str = "",
    rejected: str = "",
    json_output: bool = False,
) -> T:
    """Run `work` against the API at `address`; map gRPC failures to a message and an exit code."""

    async def session() -> T:
        client = LineageClient(address)
        try:
            return await work(client)
        finally:
            await client.close()

    try:
        return asyncio.run(session())
    except grpc.aio.AioRpcError as exc:
        code, details = exc.code(), exc.details() or ""
        if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
            raise _fail(
                f"cannot reach the lineage API at {address} ({details}); is the store running? "
                "Pass --address or set KF_STORE_GRPC_ADDRESS.",
                2,
                json_output,
                "unreachable",
            ) from None
        if code == grpc.StatusCode.NOT_FOUND:
            raise _fail(not_found or details, 1, json_output, "not_found") from None
        if code == grpc.StatusCode.INVALID_ARGUMENT:
            raise _fail(f"{rejected}{details}", 2, json_output, "invalid_argument") from None
        raise _fail(f"the lineage API at {address} failed ({code.name}): {details}", 2, json_output) from None


def _emit(json_output: bool, document: Document, render: Callable[[Console], None]) -> None:
    if json_output:
        typer.echo(json.dumps(document, indent=2, sort_keys=False))
    else:
        render(stdout_console())


# ---- messages to plain documents ----


def _when(message: Any, field: str) -> str | None:
    if not message.HasField(field):
        return None
    return getattr(message, field).ToDatetime(tzinfo=UTC).isoformat()


def _json_field(text: str) -> Any:
    return json.loads(text) if text else {}


def run_document(run: lineage_pb2.RunRecord) -> Document:
    return {
        "run_id": run.run_id,
        "task_name": run.task_name,
        "task_source": run.task_source,
        "hardware": run.hardware,
        "status": run.status,
        "created_at": _when(run, "created_at"),
        "finished_at": _when(run, "finished_at"),
        "config": _json_field(run.config_json),
        "summary": _json_field(run.summary_json),
    }


def node_document(node: lineage_pb2.LineageNode) -> Document:
    return {
        "candidate_id": node.candidate_id,
        "run_id": node.run_id,
        "parent_ids": list(node.parent_ids),
        "iteration": node.iteration,
        "depth": node.depth,
    }


def failure_document(failure: lineage_pb2.FailureCount) -> Document:
    return {"stage": failure.stage, "reason": failure.reason, "count": failure.count}


def measurement(record: lineage_pb2.EvaluationRecord) -> Measurement:
    """A stored evaluation as the one speedup definition reads it (kernelfoundry.domain.speedup)."""
    details = _json_field(record.details_json)
    spread = details.get("runtime_spread_ms") if isinstance(details, dict) else None
    return Measurement(
        candidate_id=record.candidate_id,
        correct=record.correct,
        runtime_ms=record.runtime_ms or None,
        runtime_spread_ms=float(spread) if isinstance(spread, int | float) else None,
        baseline_ms=record.baseline_ms or None,
        compile_baseline_ms=record.compile_baseline_ms or None,
    )


def show_document(
    history: lineage_pb2.GetRunHistoryResponse, failures: Sequence[lineage_pb2.FailureCount]
) -> Document:
    correct = [e for e in history.evaluations if e.correct]
    figure = run_speedup([measurement(e) for e in history.evaluations])
    hardware = {e.candidate_id: e.hardware for e in history.evaluations}
    return {
        "run": run_document(history.run),
        "counts": {
            "candidates": len(history.candidates),
            "builds": len(history.builds),
            "builds_failed": sum(1 for b in history.builds if not b.ok),
            "evaluations": len(history.evaluations),
            "evaluations_correct": len(correct),
            "failures": sum(f.count for f in failures),
        },
        "failures": [failure_document(f) for f in failures],
        "best": None
        if figure is None
        else {
            "candidate_id": figure.candidate_id,
            "hardware": hardware.get(figure.candidate_id, history.run.hardware),
            "speedup": figure.speedup,
            "runtime_ms": figure.kernel_ms,
            "runtime_spread_ms": figure.kernel_spread_ms,
            "eager_ms": figure.eager.median_ms,
            "eager_spread_ms": figure.eager.spread_ms,
            "eager_samples": figure.eager.samples,
            "eager_outliers_ms": list(figure.eager.outliers_ms),
            "retimed": figure.retimed,
        },
    }


def snapshots_document(run_id: str, snapshots: Sequence[lineage_pb2.ArchiveSnapshotRecord]) -> Document:
    """One row per iteration: the archive as its last snapshot of that iteration left it."""
    last: dict[int, lineage_pb2.ArchiveSnapshotRecord] = {}
    for snapshot in snapshots:  # ordered by (iteration, taken_at)
        last[snapshot.iteration] = snapshot
    rows = []
    for iteration in sorted(last):
        snapshot = last[iteration]
        best = max(snapshot.cells, key=lambda c: c.speedup, default=None)
        rows.append(
            {
                "iteration": iteration,
                "taken_at": _when(snapshot, "taken_at"),
                "cells_filled": len(snapshot.cells),
                "best_speedup": None if best is None else best.speedup,
                "best_candidate_id": None if best is None else best.candidate_id,
            }
        )
    return {"run_id": run_id, "snapshots": len(snapshots), "iterations": rows}


# ---- rendering ----


def _table(title: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> Table:
    """Cells are plain text: a source's `[torch.randn(...)]` is shown, never read as rich markup."""
    table = Table(title=Text(title))
    for column in columns:
        table.add_column(Text(column))
    for row in rows:
        table.add_row(*(Text("" if value is None else str(value)) for value in row))
    return table


def _fmt(value: float | None, digits: int = 3) -> str:
    return "" if value is None else f"{value:.{digits}f}"


def _moment(iso: str | None) -> str:
    """An ISO timestamp as a table shows it: to the second, UTC understood."""
    return "" if iso is None else iso[:19].replace("T", " ")


def _label(node: Document) -> str:
    where = f"run {escape(node['run_id'])}, iteration {node['iteration']}"
    return f"{escape(node['candidate_id'])}  [dim]{where}[/dim]"


def _grow(
    branch: Tree,
    ids: Iterable[str],
    nodes: dict[str, Document],
    links: Callable[[Document], Iterable[str]],
    seen: set[str],
) -> None:
    for node_id in ids:
        node = nodes.get(node_id)
        if node is None:
            continue
        if node_id in seen:
            branch.add(f"{escape(node_id)}  [dim](shown above)[/dim]")
            continue
        seen.add(node_id)
        _grow(branch.add(_label(node)), links(node), nodes, links, seen)


def lineage_view(document: Document) -> Tree:
    """Ancestors (each node's parents below it) and descendants (each node's children below it)."""
    root = document["root"]
    view = Tree(f"[bold]{_label(root)}[/bold]")
    if document["ancestors"]:
        ancestors = {n["candidate_id"]: n for n in document["ancestors"]}
        branch = view.add("[cyan]ancestors[/cyan]")
        _grow(branch, root["parent_ids"], ancestors, lambda n: n["parent_ids"], set())
    if document["descendants"]:
        descendants = {n["candidate_id"]: n for n in document["descendants"]}
        children: dict[str, list[str]] = {}
        for node in document["descendants"]:
            for parent in node["parent_ids"]:
                children.setdefault(parent, []).append(node["candidate_id"])
        branch = view.add("[green]descendants[/green]")
        first = children.get(root["candidate_id"], [])
        _grow(branch, first, descendants, lambda n: children.get(n["candidate_id"], []), set())
    return view


# ---- commands ----


@lineage_app.command("runs")
def runs(
    status: Annotated[str, typer.Option(help="running, finished, failed or cancelled")] = "",
    task: Annotated[str, typer.Option(help="Only runs of this task")] = "",
    limit: Annotated[int, typer.Option(min=0, help="At most this many runs (0: all)")] = 0,
    address: AddressOption = None,
    json_output: JsonOption = False,
) -> None:
    """List runs, newest first."""
    request = lineage_pb2.ListRunsRequest(status=status, task_name=task, limit=limit)
    answer = _call(
        _address(address),
        lambda c: c.stub.ListRuns(request, timeout=QUERY_TIMEOUT_S),
        json_output=json_output,
    )
    document = {"runs": [run_document(r) for r in answer.runs]}

    def render(console: Console) -> None:
        rows = [
            (
                r["run_id"],
                r["task_name"],
                r["hardware"],
                r["status"],
                _moment(r["created_at"]),
                _moment(r["finished_at"]),
            )
            for r in document["runs"]
        ]
        console.print(_table("runs", ("run", "task", "hardware", "status", "created", "finished"), rows))

    _emit(json_output, document, render)


@lineage_app.command("show")
def show(
    run_id: Annotated[str, typer.Argument(help="The run")],
    address: AddressOption = None,
    json_output: JsonOption = False,
) -> None:
    """A run's record and how many candidates, evaluations and failures it has."""

    async def fetch(client: LineageClient) -> Document:
        history = await client.stub.GetRunHistory(
            lineage_pb2.GetRunHistoryRequest(run_id=run_id), timeout=TRANSFER_TIMEOUT_S
        )
        failures = await client.failure_summary(run_id, timeout_s=QUERY_TIMEOUT_S)
        return show_document(history, failures)

    document = _call(_address(address), fetch, not_found=f"no run {run_id}", json_output=json_output)

    def render(console: Console) -> None:
        run = document["run"]
        facts = [(k, run[k]) for k in ("run_id", "task_name", "task_source", "hardware", "status")]
        facts += [("created_at", _moment(run["created_at"])), ("finished_at", _moment(run["finished_at"]))]
        best = document["best"]
        if best is not None:
            outliers = (
                f", {len(best['eager_outliers_ms'])} eager outlier(s)" if best["eager_outliers_ms"] else ""
            )
            facts.append(
                (
                    "best",
                    f"{best['candidate_id']} on {best['hardware']}: {_fmt(best['speedup'])}x "
                    f"({_fmt(best['runtime_ms'], 4)} ms vs eager {_fmt(best['eager_ms'], 4)} ms, "
                    f"median of {best['eager_samples']}{outliers})",
                )
            )
        console.print(_table(f"run {run['run_id']}", ("field", "value"), facts))
        console.print(_table("counts", ("what", "count"), document["counts"].items()))
        if document["failures"]:
            rows = [(f["stage"], f["reason"], f["count"]) for f in document["failures"]]
            console.print(_table("failures", ("stage", "reason", "count"), rows))

    _emit(json_output, document, render)


@lineage_app.command("tree")
def tree(
    candidate_id: Annotated[str, typer.Argument(help="The candidate at the centre of the tree")],
    max_depth: Annotated[int, typer.Option(min=0, help="Parent links to follow each way (0: all)")] = 0,
    address: AddressOption = None,
    json_output: JsonOption = False,
) -> None:
    """Ancestors and descendants of a candidate."""
    answer = _call(
        _address(address),
        lambda c: c.lineage_tree(candidate_id, max_depth=max_depth, timeout_s=QUERY_TIMEOUT_S),
        not_found=f"no candidate {candidate_id}",
        json_output=json_output,
    )
    document = {
        "root": node_document(answer.root),
        "ancestors": [node_document(n) for n in answer.ancestors],
        "descendants": [node_document(n) for n in answer.descendants],
    }
    _emit(json_output, document, lambda console: console.print(lineage_view(document)))


@lineage_app.command("best")
def best(
    task: Annotated[str, typer.Option(help="Only this task")] = "",
    hardware: Annotated[str, typer.Option(help="Only this hardware, e.g. cuda.h200")] = "",
    address: AddressOption = None,
    json_output: JsonOption = False,
) -> None:
    """The best correct kernel per task and hardware, across all runs."""
    kernels = _call(
        _address(address),
        lambda c: c.best_kernels(task_name=task, hardware=hardware, timeout_s=QUERY_TIMEOUT_S),
        json_output=json_output,
    )
    document = {
        "kernels": [
            {
                "task_name": k.task_name,
                "hardware": k.hardware,
                "candidate_id": k.candidate_id,
                "run_id": k.run_id,
                "speedup": k.speedup,
                "runtime_ms": k.runtime_ms,
            }
            for k in kernels
        ]
    }

    def render(console: Console) -> None:
        rows = [
            (
                k["task_name"],
                k["hardware"],
                k["candidate_id"],
                k["run_id"],
                _fmt(k["speedup"]),
                _fmt(k["runtime_ms"], 4),
            )
            for k in document["kernels"]
        ]
        columns = ("task", "hardware", "candidate", "run", "speedup", "runtime ms")
        console.print(_table("best kernels", columns, rows))

    _emit(json_output, document, render)


@lineage_app.command("snapshots")
def snapshots(
    run_id: Annotated[str, typer.Argument(help="The run")],
    address: AddressOption = None,
    json_output: JsonOption = False,
) -> None:
    """How the run's MAP-Elites archive filled up: cells filled and best speedup per iteration."""

    async def fetch(client: LineageClient) -> list[lineage_pb2.ArchiveSnapshotRecord]:
        await client.get_run(run_id, timeout_s=QUERY_TIMEOUT_S)  # an unknown run is NOT_FOUND, not empty
        return await client.archive_snapshots(run_id, timeout_s=TRANSFER_TIMEOUT_S)

    found = _call(_address(address), fetch, not_found=f"no run {run_id}", json_output=json_output)
    document = snapshots_document(run_id, found)

    def render(console: Console) -> None:
        rows = [
            (
                r["iteration"],
                r["cells_filled"],
                _fmt(r["best_speedup"]),
                r["best_candidate_id"],
                _moment(r["taken_at"]),
            )
            for r in document["iterations"]
        ]
        columns = ("iteration", "cells filled", "best speedup", "best candidate", "taken at")
        console.print(_table(f"archive of {run_id}", columns, rows))

    _emit(json_output, document, render)


@lineage_app.command("failures")
def failures(
    run: Annotated[str, typer.Option("--run", help="Only this run (default: all runs)")] = "",
    address: AddressOption = None,
    json_output: JsonOption = False,
) -> None:
    """Failed builds and incorrect evaluations by stage and reason, most frequent first."""

    async def fetch(client: LineageClient) -> list[lineage_pb2.FailureCount]:
        if run:
            await client.get_run(run, timeout_s=QUERY_TIMEOUT_S)
        return await client.failure_summary(run, timeout_s=QUERY_TIMEOUT_S)

    found = _call(_address(address), fetch, not_found=f"no run {run}", json_output=json_output)
    document = {"run_id": run or None, "failures": [failure_document(f) for f in found]}

    def render(console: Console) -> None:
        rows = [(f["stage"], f["reason"], f["count"]) for f in document["failures"]]
        title = f"failures of {run}" if run else "failures, all runs"
        console.print(_table(title, ("stage", "reason", "count"), rows))

    _emit(json_output, document, render)


@lineage_app.command("usage")
def usage(
    run: Annotated[str, typer.Option("--run", help="Only this run (default: all runs)")] = "",
    group_by: Annotated[GroupBy, typer.Option(help="Totals per generator or per run")] = GroupBy.generator,
    address: AddressOption = None,
    json_output: JsonOption = False,
) -> None:
    """Generation requests, tokens and cost."""

    async def fetch(client: LineageClient) -> list[lineage_pb2.UsageTotal]:
        if run:
            await client.get_run(run, timeout_s=QUERY_TIMEOUT_S)
        return await client.usage_totals(run, group_by=group_by.value, timeout_s=QUERY_TIMEOUT_S)

    found = _call(_address(address), fetch, not_found=f"no run {run}", json_output=json_output)
    document = {
        "run_id": run or None,
        "group_by": group_by.value,
        "totals": [
            {
                "key": t.key,
                "requests": t.requests,
                "prompt_tokens": t.prompt_tokens,
                "completion_tokens": t.completion_tokens,
                "cost_usd": t.cost_usd,
            }
            for t in found
        ],
    }

    def render(console: Console) -> None:
        rows = [
            (t["key"], t["requests"], t["prompt_tokens"], t["completion_tokens"], f"{t['cost_usd']:.4f}")
            for t in document["totals"]
        ]
        columns = (group_by.value, "requests", "prompt tokens", "completion tokens", "cost USD")
        console.print(_table("usage", columns, rows))

    _emit(json_output, document, render)


@lineage_app.command("export")
def export(
    run_id: Annotated[str, typer.Argument(help="The run")],
    file: Annotated[
        Path | None,
        typer.Argument(help="File or folder to write (default: the server's file name here)"),
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="The same as FILE"),
    ] = None,
    address: AddressOption = None,
    json_output: JsonOption = False,
) -> None:
    """Write a run (kernels, lineage, results) as one archive file that `import` reads back."""
    if file is not None and output is not None and file != output:
        raise _fail(f"two places to write: FILE {file} and --output {output}; give one", 2, json_output)
    output = file if file is not None else output
    answer = _call(
        _address(address),
        lambda c: c.export_run(run_id, timeout_s=TRANSFER_TIMEOUT_S),
        not_found=f"no run {run_id}",
        json_output=json_output,
    )
    # Only the base name of what the server suggests: it must not choose a folder on this machine.
    name = Path(answer.file_name).name or f"{run_id}.kfrun.tar.gz"
    target = output if output is not None else Path(name)
    if target.is_dir():
        target = target / name
    try:
        target.write_bytes(answer.archive)
    except OSError as exc:
        raise _fail(
            f"cannot write the archive of run {run_id} to {target}: {exc.strerror or exc}",
            2,
            json_output,
            "cannot_write",
        ) from None
    document = {"run_id": run_id, "path": str(target), "bytes": len(answer.archive)}
    _emit(
        json_output,
        document,
        lambda console: console.print(f"wrote run {run_id} to {target} ({len(answer.archive)} bytes)"),
    )


@lineage_app.command("import")
def import_(
    archive: Annotated[
        Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="A run archive from `export`")
    ],
    address: AddressOption = None,
    json_output: JsonOption = False,
) -> None:
    """Load a run archive into the store (idempotent: importing the same run twice adds nothing)."""
    data = archive.read_bytes()
    answer = _call(
        _address(address),
        lambda c: c.import_run(data, timeout_s=TRANSFER_TIMEOUT_S),
        rejected=f"cannot import {archive}: ",
        json_output=json_output,
    )
    document = {"run_id": answer.run_id, "candidates": answer.candidates, "evaluations": answer.evaluations}
    _emit(
        json_output,
        document,
        lambda console: console.print(
            f"imported run {answer.run_id}: {answer.candidates} candidates, "
            f"{answer.evaluations} evaluations added"
        ),
    )
