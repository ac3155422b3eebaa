"""The run report as HTML (kernelfoundry.report.html): every section, real plots, escaped text, nothing
fetched from outside the page."""

from __future__ import annotations

import dataclasses
import re
from html.parser import HTMLParser

import pytest
import report_records as sample

from kernelfoundry.domain.descriptors import DESCRIPTOR_AXES, LEVELS
from kernelfoundry.report import SECTIONS, build_report, render_html
from kernelfoundry.report.html import external_references


def page(**overrides: object) -> str:
    parts: dict[str, object] = {
        "run": sample.run(),
        "candidates": sample.candidates(),
        "builds": sample.builds(),
        "evaluations": sample.evaluations(),
        "snapshots": sample.snapshots(),
    }
    parts.update(overrides)
    return render_html(build_report(**parts))  # type: ignore[arg-type]


class Sections(HTMLParser):
    """The text and the number of <svg> elements inside each <section id=...>."""

    def __init__(self) -> None:
        super().__init__()
        self.current = ""
        self.depth = 0
        self.text: dict[str, str] = {}
        self.plots: dict[str, int] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "section":
            self.current = dict(attrs).get("id") or ""
            self.text[self.current] = ""
            self.plots[self.current] = 0
        elif tag == "svg" and self.current:
            self.plots[self.current] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self.current = ""

    def handle_data(self, data: str) -> None:
        if self.current:
            self.text[self.current] += data


def sections(html: str) -> Sections:
    parsed = Sections()
    parsed.feed(html)
    return parsed


def test_every_section_is_present_in_order_with_its_plots() -> None:
    html = page()
    parsed = sections(html)
    assert list(parsed.text) == list(SECTIONS)
    assert parsed.plots["speedup"] == 2  # speedup over evaluations, archive coverage
    assert parsed.plots["archive"] == 1
    assert parsed.plots["failures"] == 1
    assert parsed.plots["baselines"] == 1
    assert "4.00x" in parsed.text["summary"]


def test_the_page_references_nothing_outside_itself() -> None:
    html = page()
    assert external_references(html) == []
    assert "<script" not in html.lower() and "<link" not in html.lower()
    # the only absolute URLs are the SVG namespace names, which no browser fetches
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", html))
    assert urls <= {"http://www.w3.org/2000/svg", "http://www.w3.org/1999/xlink"}


@pytest.mark.parametrize(
    "snippet",
    [
        '<img src="https://example.org/x.png">',
        '<link rel="stylesheet" href="/style.css">',
        "<style>body { background: url(//cdn.example/bg.png) }</style>",
        "<style>@import 'theme.css';</style>",
        '<svg><image xlink:href="file:///etc/passwd"/></svg>',
    ],
)
def test_the_reference_check_finds_what_a_browser_would_fetch(snippet: str) -> None:
    assert external_references(f"<html><body>{snippet}</body></html>") != []


def test_in_page_fragments_and_data_uris_are_not_external() -> None:
    inline = (
        '<a href="#archive">a</a><svg><use xlink:href="#g1"/><image href="data:image/png;base64,AA"/></svg>'
    )
    assert external_references(inline) == []


def test_client_text_is_escaped_and_the_best_source_is_shown_verbatim() -> None:
    html = page()
    assert "relu&lt;script&gt;" in html and "relu<script>" not in html
    source = sections(html).text["source"]
    assert sample.BEST_CODE.strip() in source  # the text a reader sees: the code as written
    assert "&lt;kernel&gt; &amp; &quot;friends&quot;" in html


def test_the_heatmaps_show_one_panel_per_level_of_the_third_axis_in_the_backend_s_words() -> None:
    archive_svg = re.search(r'<section id="archive">.*?</section>', page(), re.DOTALL)
    assert archive_svg is not None
    third = DESCRIPTOR_AXES[-1]
    titles = [f"<!-- {third.name}: {word} -->" for word in third.words["cpu"]]
    assert len(titles) == LEVELS
    for title in titles:
        assert title in archive_svg.group(0)
    for cell in ("m2", "m1", "s1"):
        assert f"<td>{cell}</td>" in archive_svg.group(0)


def test_the_lineage_table_lists_the_parent_chain_with_operators() -> None:
    lineage = sections(page()).text["lineage"]
    assert lineage.index("m2") < lineage.index("m1") < lineage.index("s1")
    for operator in ("tiling", "vectorize", "seed"):
        assert operator in lineage


def test_baselines_name_eager_and_torch_compile_with_their_medians() -> None:
    baselines = sections(page()).text["baselines"]
    assert "PyTorch eager" in baselines and "torch.compile" in baselines
    assert f"{sample.EAGER_MS:.4g} ms" in baselines and f"{sample.COMPILE_MS:.4g} ms" in baselines
    assert "best kernel vs torch.compile" in baselines


def test_a_run_that_made_nothing_still_renders_every_section_saying_so() -> None:
    html = page(run=sample.run("cancelled"), candidates=[], builds=[], evaluations=[], snapshots=[])
    parsed = sections(html)
    assert list(parsed.text) == list(SECTIONS)
    assert "no evaluation" in parsed.text["speedup"]
    assert "no elite" in parsed.text["archive"]
    assert "No baseline" in parsed.text["baselines"]
    assert external_references(html) == []


def test_a_run_whose_failures_have_no_reason_still_renders() -> None:
    evaluations = [dataclasses.replace(e, correct=False, reason="") for e in sample.evaluations()]
    failures = sections(page(evaluations=evaluations)).text["failures"]
    assert "unspecified" in failures


def test_the_same_report_renders_to_the_same_bytes() -> None:
    assert page() == page()
