"""The run report: `build_report` turns a run's lineage records into figures (model), `render_html` draws
them as one self-contained HTML page (html, with matplotlib plots as inline SVG in plots)."""

from kernelfoundry.report.html import SECTIONS, render_html
from kernelfoundry.report.model import RunReport, build_report

__all__ = ["SECTIONS", "RunReport", "build_report", "render_html"]
