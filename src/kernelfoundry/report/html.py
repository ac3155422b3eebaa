"""A `RunReport` as one self-contained HTML page: inline CSS, inline SVG plots, no script, no external URL.

Sections, each a `<section id=...>`: `summary`, `speedup` (the speedup over evaluations and the archive's
coverage), `archive` (heatmaps), `lineage` (the best kernel's parent chain), `failures`, `baselines` (eager
and torch.compile beside the best kernel) and `source` (the best kernel's code). Everything a run or a
client wrote (task name, candidate ids, reasons, source code, settings) is HTML-escaped. A section with
nothing to show says so instead of disappearing.

Builds a string; must never write a file or reach the network.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from datetime import datetime
from html import escape
from html.parser import HTMLParser

from kernelfoundry.domain.descriptors import AXES, DESCRIPTOR_AXES, Descriptors
from kernelfoundry.report import plots
from kernelfoundry.report.model import RunReport

# Attributes that make a browser fetch something; only in-page fragments and data: URIs may fill them.
_FETCHING = frozenset({"href", "src", "xlink:href", "srcset", "action", "poster", "data", "background"})
_CSS_URL = re.compile(r"url\(\s*['\"]?(?!#|data:)([^)'\"]*)|@import", re.IGNORECASE)
SECTIONS = ("summary", "speedup", "archive", "lineage", "failures", "baselines", "source")

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #1d1d1f;
       background: #fafafa; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 32px 48px; }
h1 { font-size: 1.5rem; margin: 0 0 4px; }
h2 { font-size: 1.15rem; border-bottom: 1px solid #ddd; padding-bottom: 4px; margin-top: 32px; }
.sub { color: #666; margin: 0 0 16px; }
nav a { margin-right: 14px; color: #1f6fb4; text-decoration: none; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 8px 0; }
th, td { text-align: left; padding: 4px 10px; border-bottom: 1px solid #e6e6e6; vertical-align: top; }
th { background: #f0f0f0; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.figure { background: white; border: 1px solid #e6e6e6; padding: 8px; margin: 8px 0; overflow-x: auto; }
.figure svg { max-width: 100%; height: auto; }
.row { display: flex; gap: 16px; flex-wrap: wrap; align-items: flex-start; }
.headline { font-size: 2rem; font-weight: 600; color: #e07b00; }
.empty { color: #888; font-style: italic; }
pre { background: #1e1e1e; color: #e8e8e8; padding: 12px; overflow-x: auto; font-size: 0.8rem;
      line-height: 1.35; border-radius: 4px; }
pre.source { max-height: 48em; }
code { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
"""


class _References(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self._in_style = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("script", "link", "iframe", "object", "embed", "base"):
            self.found.append(f"<{tag}>")
        self._in_style = tag == "style"
        for name, value in attrs:
            value = (value or "").strip()
            if name in _FETCHING and value and not value.startswith(("#", "data:")):
                self.found.append(f"{name}={value}")
            if name == "style":
                self.found.extend(m.group(0) for m in _CSS_URL.finditer(value))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        self._in_style = False

    def handle_endtag(self, tag: str) -> None:
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.found.extend(m.group(0) for m in _CSS_URL.finditer(data))


def external_references(page: str) -> list[str]:
    """Whatever in `page` would make a browser fetch something from outside it: a script, stylesheet or
    frame element, an href/src that is not an in-page fragment or a data: URI, a CSS url() or @import."""
    parser = _References()
    parser.feed(page)
    parser.close()
    return parser.found


def level_words(hardware: str) -> dict[str, tuple[str, ...]]:
    """Each axis's level names for the run's backend (`cpu.x86_64` -> cpu); others get the GPU words."""
    backend = hardware.split(".", 1)[0]
    return {axis.name: axis.words.get(backend, axis.words["cuda"]) for axis in DESCRIPTOR_AXES}


def _num(value: float | None, digits: int = 3, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}f}{suffix}"


def _ms(value: float | None) -> str:
    return "-" if value is None or value <= 0 else f"{value:.4g} ms"


def _when(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _table(columns: Sequence[str], rows: Iterable[Sequence[str]], numeric: Sequence[int] = ()) -> str:
    """Cells arrive escaped (or built from escaped parts); headers are escaped here."""
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{cell}</td>' if i in numeric else f"<td>{cell}</td>"
            for i, cell in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _figure(svg: str) -> str:
    return f'<div class="figure">{svg}</div>'


def _empty(text: str) -> str:
    return f'<p class="empty">{escape(text)}</p>'


def _describe(descriptors: Descriptors | None, words: dict[str, tuple[str, ...]]) -> str:
    if descriptors is None:
        return "-"
    return escape(" / ".join(words[axis][getattr(descriptors, axis)] for axis in AXES))


def _summary(report: RunReport) -> str:
    run, counts, figure = report.run, report.counts, report.baselines.figure
    headline = (
        f'<div class="headline">{figure.speedup:.2f}x</div>'
        f"<p>over PyTorch eager: {_ms(figure.eager.median_ms)} eager (median of {figure.eager.samples}) "
        f"against {_ms(figure.kernel_ms)} for the best kernel{', re-timed' if figure.retimed else ''}.</p>"
        if figure is not None
        else _empty("No correct, timed kernel: the run has no speedup figure.")
    )
    facts = [
        ("run", escape(run.run_id)),
        ("task", escape(run.task_name)),
        ("hardware", escape(run.hardware)),
        ("status", escape(run.status)),
        ("created", _when(run.created_at)),
        ("finished", _when(run.finished_at)),
        ("candidates", str(counts.candidates)),
        ("builds (failed)", f"{counts.builds} ({counts.builds_failed})"),
        ("evaluations (correct)", f"{counts.evaluations} ({counts.evaluations_correct})"),
        ("archive", f"{len(report.archive)} of {report.cell_count} cells filled"),
    ]
    settings = escape(json.dumps(dict(run.settings), indent=2, sort_keys=True, default=str))
    return (
        f'<section id="summary"><h2>Summary</h2><div class="row"><div>{headline}'
        f"{_table(('what', 'value'), facts)}</div>"
        f"<div><p>Run settings</p><pre><code>{settings}</code></pre></div></div></section>"
    )


def _speedup(report: RunReport) -> str:
    if not report.curve:
        body = _empty("The run made no evaluation.")
    else:
        body = _figure(plots.speedup_curve(report.curve, report.baselines))
        body += (
            "<p>Each kernel's median time over the run's pooled eager median; failed or wrong evaluations "
            "sit on the axis. The dashed orange line is the run's figure (its fastest kernel, re-timed "
            "beside eager before the run ended).</p>"
        )
    if report.coverage:
        body += "<h3>Archive coverage per iteration</h3>"
        body += _figure(plots.coverage_curve(report.coverage, report.cell_count))
    return f'<section id="speedup"><h2>Speedup over evaluations</h2>{body}</section>'


def _archive(report: RunReport, words: dict[str, tuple[str, ...]]) -> str:
    if not report.archive:
        body = _empty("The archive holds no elite.")
    else:
        rows_axis, columns_axis, panel_axis = AXES
        body = _figure(plots.archive_heatmaps(report.archive, words))
        body += (
            f"<p>One heatmap per {escape(panel_axis)} level: rows are {escape(rows_axis)}, columns "
            f"{escape(columns_axis)}; each filled cell shows its elite's speedup over the run's pooled eager "
            "median.</p>"
        )
        rows = [
            (
                escape(cell.candidate_id),
                _describe(cell.descriptors, words),
                _num(cell.speedup, 2, "x"),
                _ms(cell.runtime_ms),
            )
            for cell in sorted(report.archive, key=lambda c: -c.speedup)
        ]
        body += _table(("elite", " / ".join(AXES), "speedup", "time"), rows, numeric=(2, 3))
    return f'<section id="archive"><h2>Archive (MAP-Elites)</h2>{body}</section>'


def _lineage(report: RunReport, words: dict[str, tuple[str, ...]]) -> str:
    if not report.lineage:
        body = _empty("No best kernel, so no lineage.")
    else:
        rows = [
            (
                escape(step.candidate_id),
                str(step.iteration),
                escape(step.operator or ("repair" if step.repair_of else "seed")),
                escape(step.generator or "-"),
                escape(", ".join(step.parent_ids) or "-"),
                _describe(step.descriptors, words),
                escape(step.outcome),
                _num(step.speedup, 2, "x"),
                _ms(step.runtime_ms),
            )
            for step in report.lineage
        ]
        columns = ("candidate", "iteration", "operator", "generator", "parents", "descriptors")
        body = "<p>The best kernel first, then each candidate's first parent back to its seed.</p>" + _table(
            (*columns, "outcome", "speedup", "time"), rows, numeric=(1, 7, 8)
        )
    return f'<section id="lineage"><h2>Lineage of the best kernel</h2>{body}</section>'


def _failures(report: RunReport) -> str:
    if not report.failures:
        body = _empty("No build failed and every evaluation was correct.")
    else:
        rows = [(escape(f.stage), escape(f.reason or "unspecified"), str(f.count)) for f in report.failures]
        body = '<div class="row">' + _figure(plots.failure_bars(report.failures))
        body += _table(("stage", "reason", "count"), rows, numeric=(2,)) + "</div>"
    return f'<section id="failures"><h2>Failure reasons</h2>{body}</section>'


def _baselines(report: RunReport) -> str:
    b = report.baselines
    if b.eager is None and b.compiled is None:
        return (
            '<section id="baselines"><h2>Baselines</h2>' + _empty("No baseline was measured.") + "</section>"
        )
    rows = []
    for name, pool in (("PyTorch eager", b.eager), ("torch.compile", b.compiled)):
        if pool is None:
            rows.append((escape(name), "not measured", "-", "-", "-"))
            continue
        outliers = ", ".join(f"{v:.4g}" for v in pool.outliers_ms) or "-"
        rows.append((escape(name), _ms(pool.median_ms), _ms(pool.spread_ms), str(pool.samples), outliers))
    figure = b.figure
    if figure is not None:
        rows.append(("best kernel", _ms(figure.kernel_ms), _ms(figure.kernel_spread_ms), "1", "-"))
    table = _table(("", "median", "IQR", "samples", "outliers (ms)"), rows, numeric=(1, 2, 3))
    ratios = []
    if figure is not None:
        ratios.append(("best kernel vs eager", _num(figure.speedup, 2, "x")))
        ratios.append(("best kernel vs torch.compile", _num(b.speedup_vs_compile, 2, "x")))
        if figure.retimed and figure.side_by_side_speedup:
            ratios.append(("side by side with eager (re-time)", _num(figure.side_by_side_speedup, 2, "x")))
    if b.eager is not None and b.compiled is not None:
        ratios.append(("torch.compile vs eager", _num(b.eager.median_ms / b.compiled.median_ms, 2, "x")))
    body = f'<div class="row">{_figure(plots.baseline_bars(b))}<div>{table}'
    body += _table(("ratio", "speedup"), ratios, numeric=(1,)) + "</div></div>"
    return f'<section id="baselines"><h2>Eager and torch.compile baselines</h2>{body}</section>'


def _source(report: RunReport) -> str:
    best = report.best
    if best is None:
        body = _empty("No best kernel.")
    else:
        params = ", ".join(f"{k}={v}" for k, v in sorted(best.params.items())) or "none"
        body = (
            f"<p>{escape(best.candidate_id)}: {escape(best.language)}, entry point "
            f"<code>{escape(best.entry_point)}</code>, parameters {escape(params)}.</p>"
            f'<pre class="source"><code>{escape(best.code)}</code></pre>'
        )
        if best.glue:
            body += f"<p>Python glue</p><pre><code>{escape(best.glue)}</code></pre>"
    return f'<section id="source"><h2>Best kernel source</h2>{body}</section>'


def render_html(report: RunReport) -> str:
    """The whole report as one HTML document; ValueError if it would reference anything outside itself."""
    words = level_words(report.run.hardware)
    title = f"KernelFoundry run {report.run.run_id}: {report.run.task_name}"
    nav = "".join(f'<a href="#{s}">{s}</a>' for s in SECTIONS)
    parts = [
        _summary(report),
        _speedup(report),
        _archive(report, words),
        _lineage(report, words),
        _failures(report),
        _baselines(report),
        _source(report),
    ]
    page = (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{escape(title)}</title><style>{_CSS}</style></head><body><main>"
        f"<h1>{escape(title)}</h1>"
        f'<p class="sub">{escape(report.run.hardware)} &middot; {escape(report.run.status)} &middot; '
        f"{_when(report.run.created_at)}</p><nav>{nav}</nav>"
        f"{''.join(parts)}</main></body></html>\n"
    )
    outside = external_references(page)
    if outside:  # the page's promise: it opens anywhere, offline, and fetches nothing
        raise ValueError(f"the report would fetch from outside itself: {outside[:3]}")
    return page
