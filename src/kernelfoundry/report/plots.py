"""The run report's plots, drawn with matplotlib and returned as inline SVG text (nothing is written).

Each function takes the parts of a `RunReport` it draws and returns one `<svg>` element, without the XML
declaration, DOCTYPE or metadata block, ready to sit inside the report's HTML. Figures are built with
`matplotlib.figure.Figure` (never pyplot: no global figure state, safe in any thread), text is drawn as
paths (the SVG needs no font) and SVG ids are salted with a fixed string, so the same report renders to
the same bytes. Mathtext is off: nothing a label holds is read as a formula.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import matplotlib
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from kernelfoundry.domain.descriptors import AXES, LEVELS
from kernelfoundry.lineage.views import FailureCount
from kernelfoundry.report.model import ArchiveCell, Baselines, CoveragePoint, CurvePoint

STYLE = {
    "svg.fonttype": "path",
    "svg.hashsalt": "kernelfoundry-report",
    "text.parse_math": False,
    "font.size": 9.0,
    "axes.spines.top": False,
    "axes.spines.right": False,
}
KERNEL = "#1f6fb4"
BEST = "#e07b00"
FAILED = "#c0392b"
EAGER = "#555555"
COMPILED = "#7d3c98"
_PROLOGUE = re.compile(r"\A.*?(?=<svg)", re.DOTALL)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.DOTALL)


@contextmanager
def _style() -> Iterator[None]:
    with matplotlib.rc_context(STYLE):
        yield


def _svg(figure: Figure) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = _PROLOGUE.sub("", buffer.getvalue(), count=1)
    return _METADATA.sub("", text, count=1).strip()


def speedup_curve(
    points: Sequence[CurvePoint], baselines: Baselines, *, width_in: float = 9.0, height_in: float = 3.6
) -> str:
    """Each evaluation's speedup over eager (dots), failures on the axis (crosses), the best so far (a
    step line), the run's re-timed figure and torch.compile's speedup over eager (dashed lines)."""
    with _style():
        figure = Figure(figsize=(width_in, height_in))
        axes = figure.add_subplot()
        timed = [p for p in points if p.speedup is not None]
        failed = [p for p in points if p.speedup is None]
        axes.axhline(1.0, color=EAGER, linewidth=0.8, linestyle=":", label="PyTorch eager (1.0x)")
        if baselines.eager is not None and baselines.compiled is not None:
            ratio = baselines.eager.median_ms / baselines.compiled.median_ms
            axes.axhline(
                ratio, color=COMPILED, linewidth=1.0, linestyle="--", label=f"torch.compile ({ratio:.2f}x)"
            )
        if timed:
            axes.scatter(
                [p.index for p in timed],
                [p.speedup for p in timed],
                s=14,
                color=KERNEL,
                label="correct kernel",
            )
            steps = [p for p in points if p.best_so_far is not None]
            axes.step(
                [p.index for p in steps],
                [p.best_so_far for p in steps],
                where="post",
                color=BEST,
                linewidth=1.6,
                label="best so far",
            )
        if failed:
            axes.scatter(
                [p.index for p in failed],
                [0.0] * len(failed),
                marker="x",
                s=18,
                color=FAILED,
                label="failed or wrong",
                clip_on=False,
            )
        run_figure = baselines.figure
        if run_figure is not None:
            label = "run figure, re-timed" if run_figure.retimed else "run figure"
            axes.axhline(
                run_figure.speedup,
                color=BEST,
                linewidth=1.0,
                linestyle="--",
                label=f"{label} ({run_figure.speedup:.2f}x)",
            )
        axes.set_xlabel("evaluation")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set_ylabel("speedup over eager (x)")
        axes.set_ylim(bottom=0.0)
        if points:
            axes.set_xlim(0.5, max(p.index for p in points) + 0.5)
        axes.grid(True, alpha=0.3)
        axes.legend(loc="upper left", fontsize=7.5, frameon=False)
        return _svg(figure)


def archive_heatmaps(cells: Sequence[ArchiveCell], words: dict[str, tuple[str, ...]]) -> str:
    """The archive's cells as one heatmap per level of the third axis: rows the first axis, columns the
    second, colour the elite's speedup; an empty cell stays blank."""
    rows_axis, columns_axis, panel_axis = AXES
    grids = [[[None] * LEVELS for _ in range(LEVELS)] for _ in range(LEVELS)]
    for cell in cells:
        d = cell.descriptors
        grids[getattr(d, panel_axis)][getattr(d, rows_axis)][getattr(d, columns_axis)] = cell.speedup
    values = [c.speedup for c in cells]
    norm = Normalize(
        vmin=min(values, default=0.0), vmax=max(max(values, default=1.0), min(values, default=0.0) + 1e-9)
    )
    with _style():
        figure = Figure(figsize=(13.0, 4.4))
        panels = figure.subplots(1, LEVELS, sharey=True)
        image = None
        for level, axes in enumerate(panels):
            grid = grids[level]
            masked = [[float("nan") if v is None else v for v in row] for row in grid]
            image = axes.imshow(masked, cmap="viridis", norm=norm, origin="lower", aspect="equal")
            for r in range(LEVELS):
                for c in range(LEVELS):
                    value = grid[r][c]
                    if value is not None:
                        shade = "black" if norm(value) > 0.6 else "white"
                        axes.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=7.5, color=shade)
            axes.set_xticks(
                range(LEVELS),
                words[columns_axis],
                fontsize=7,
                rotation=35,
                ha="right",
                rotation_mode="anchor",
            )
            axes.set_yticks(range(LEVELS), words[rows_axis], fontsize=7)
            axes.set_title(f"{panel_axis}: {words[panel_axis][level]}", fontsize=8.5)
            axes.set_xlabel(columns_axis, fontsize=8)
            axes.set_facecolor("#f2f2f2")
            for side in ("top", "right"):
                axes.spines[side].set_visible(True)
        panels[0].set_ylabel(rows_axis, fontsize=8)
        if image is not None:
            bar = figure.colorbar(image, ax=list(panels), shrink=0.8, pad=0.02)
            bar.set_label("speedup over eager (x)")
        return _svg(figure)


def coverage_curve(points: Sequence[CoveragePoint], cell_count: int) -> str:
    """Cells filled at the end of each iteration (bars) out of the archive's `cell_count`."""
    with _style():
        figure = Figure(figsize=(5.0, 2.6))
        axes = figure.add_subplot()
        axes.bar([p.iteration for p in points], [p.cells_filled for p in points], color=KERNEL, width=0.6)
        for p in points:
            axes.text(
                p.iteration, p.cells_filled, str(p.cells_filled), ha="center", va="bottom", fontsize=7.5
            )
        axes.set_xlabel("iteration")
        axes.set_ylabel(f"cells filled (of {cell_count})")
        axes.set_xticks([p.iteration for p in points])
        axes.yaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set_ylim(0, max([p.cells_filled for p in points] + [1]) * 1.25)
        return _svg(figure)


def failure_bars(failures: Sequence[FailureCount]) -> str:
    """How often each (stage, reason) happened, most frequent at the top."""
    with _style():
        figure = Figure(figsize=(6.5, 0.4 + 0.32 * max(len(failures), 1)))
        axes = figure.add_subplot()
        labels = [f"{f.stage}: {f.reason or 'unspecified'}" for f in failures][::-1]
        counts = [f.count for f in failures][::-1]
        colours = [FAILED if f.stage == "evaluation" else BEST for f in failures][::-1]
        axes.barh(labels, counts, color=colours, height=0.6)
        for y, count in enumerate(counts):
            axes.text(count, y, f" {count}", va="center", fontsize=7.5)
        axes.set_xlabel("count")
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
        axes.set_xlim(0, max([*counts, 1]) * 1.15)
        return _svg(figure)


def baseline_bars(baselines: Baselines) -> str:
    """Median times of PyTorch eager, torch.compile and the best kernel, with each pool's IQR."""
    rows: list[tuple[str, float, float, str]] = []
    if baselines.eager is not None:
        rows.append(("PyTorch eager", baselines.eager.median_ms, baselines.eager.spread_ms, EAGER))
    if baselines.compiled is not None:
        rows.append(("torch.compile", baselines.compiled.median_ms, baselines.compiled.spread_ms, COMPILED))
    if baselines.figure is not None:
        rows.append(("best kernel", baselines.figure.kernel_ms, baselines.figure.kernel_spread_ms, BEST))
    rows.reverse()
    with _style():
        figure = Figure(figsize=(6.5, 0.5 + 0.42 * max(len(rows), 1)))
        axes = figure.add_subplot()
        axes.barh(
            [r[0] for r in rows],
            [r[1] for r in rows],
            xerr=[r[2] / 2 for r in rows],
            color=[r[3] for r in rows],
            height=0.55,
            capsize=3,
        )
        for y, (_, median, _, _) in enumerate(rows):
            axes.text(median, y + 0.32, f"{median:.4g} ms", va="center", fontsize=7.5)
        axes.set_xlabel("median time (ms); whiskers: interquartile range")
        return _svg(figure)
