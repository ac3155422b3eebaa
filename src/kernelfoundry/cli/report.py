"""`kernelfoundry report RUN`: one self-contained HTML page about a run, written to a file.

A thin adapter: the run's records come from the store's lineage API as one run archive (the ExportRun
call, as `kernelfoundry lineage export` makes it: kernels, lineage, evaluations and snapshots, the same
from SQLite or MongoDB), or from an archive file already exported (`--archive`); kernelfoundry.report
builds the figures and renders the page. Failures end like `kernelfoundry lineage`'s: an unreachable API or
an unreadable archive exits 2, an unknown run exits 1, one line on stderr.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from kernelfoundry.cli.lineage import TRANSFER_TIMEOUT_S, AddressOption, _address, _call, _fail
from kernelfoundry.lineage.errors import LineageError
from kernelfoundry.lineage.export import RunArchive, read_archive, read_archive_bytes


def _archive_of(run_id: str | None, archive: Path | None, address: str | None) -> RunArchive:
    try:
        if archive is not None:
            found = read_archive(archive)
            if run_id and found.run.run_id != run_id:
                raise _fail(f"{archive} holds run {found.run.run_id}, not {run_id}", 2)
            return found
        if not run_id:
            raise _fail("name a RUN, or an exported run with --archive", 2)
        answer = _call(
            _address(address),
            lambda c: c.export_run(run_id, timeout_s=TRANSFER_TIMEOUT_S),
            not_found=f"no run {run_id}",
        )
        return read_archive_bytes(answer.archive)
    except LineageError as exc:
        raise _fail(f"cannot read the run: {exc}", 2) from None
    except OSError as exc:
        raise _fail(f"cannot read {archive}: {exc.strerror or exc}", 2) from None


def report(
    run_id: Annotated[str | None, typer.Argument(help="The run (omit with --archive)")] = None,
    output: Annotated[
        Path | None, typer.Option("--output", "-o", help="HTML file to write (default: RUN.report.html here)")
    ] = None,
    archive: Annotated[
        Path | None,
        typer.Option(
            dir_okay=False, help="Read the run from an archive `kernelfoundry lineage export` wrote"
        ),
    ] = None,
    address: AddressOption = None,
) -> None:
    """Write one self-contained HTML report of a run: speedup curve, archive heatmaps, lineage of the best
    kernel, failure reasons, eager and torch.compile baselines, and the best kernel's source."""
    from kernelfoundry.report import build_report, render_html  # matplotlib: only when a report is made

    found = _archive_of(run_id, archive, address)
    page = render_html(
        build_report(found.run, found.candidates, found.builds, found.evaluations, found.snapshots)
    )
    target = output if output is not None else Path(f"{found.run.run_id}.report.html")
    if target.is_dir():
        target = target / f"{found.run.run_id}.report.html"
    try:
        target.write_text(page, encoding="utf-8")
    except OSError as exc:
        raise _fail(f"cannot write the report to {target}: {exc.strerror or exc}", 2) from None
    Console(stderr=True, highlight=False, soft_wrap=True).print(
        f"wrote the report of run {found.run.run_id} to {target} ({len(page.encode())} bytes)", markup=False
    )
