"""`kernelfoundry report` on a finished CPU run: the real stack (JetStream and the five services as
processes) runs a small task to the end, then the command reads the run from the store's lineage API and
writes one HTML page; the page has every section with real plots, and references nothing outside itself.
The same run exported with `kernelfoundry lineage export` renders the same page offline (--archive).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelfoundry.cli.main import app
from kernelfoundry.client import KernelFoundryClient
from kernelfoundry.report import SECTIONS
from kernelfoundry.report.html import external_references
from kernelfoundry.stack.hardware import cpu_target
from kernelfoundry.stack.supervisor import Stack
from kernelfoundry.tasks.loading import load_task
from kernelfoundry.tasks.model import ShapeVariant
from kernelfoundry.v1 import run_pb2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[3]
# Small shapes and few timed runs keep each evaluation around a second on two cores.
FAST_ENV = {"KF_TIMED_RUNS": "10", "KF_CORRECTNESS_TRIALS": "5", "KF_ACK_WAIT_S": "6", "KF_HEARTBEAT_S": "2"}


class SectionPlots(HTMLParser):
    """The id of every <section> in order, and how many <svg> plots each holds."""

    def __init__(self) -> None:
        super().__init__()
        self.plots: dict[str, int] = {}
        self.current = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "section":
            self.current = dict(attrs).get("id") or ""
            self.plots[self.current] = 0
        elif tag == "svg" and self.current:
            self.plots[self.current] += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "section":
            self.current = ""


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, str]]:
    stack = Stack(state_dir=tmp_path_factory.mktemp("stack"), hardware=[cpu_target()], extra_env=FAST_ENV)
    stack.start()
    try:
        client = KernelFoundryClient(stack.grpc_address)
        task = load_task(ROOT / "tasks" / "level2_elementwise_chain.py")
        task = replace(task, shapes=(ShapeVariant("small", {"batch_size": 256, "dim": 4096}),))
        config = run_pb2.RunConfig(
            hardware=cpu_target().execute, iterations=2, population=2, sweeps=False, seed=1
        )
        run_id = client.submit(task, config)
        final = list(client.progress(run_id))[-1]
        client.close()
        assert final.status == run_pb2.RUN_STATUS_COMPLETED, final.message
        yield stack, run_id
    finally:
        stack.stop()


def report(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["report", *args])
    return result.exit_code, result.output


def wait_finished_in_store(stack: Stack, run_id: str, timeout_s: float = 60.0) -> None:
    """The store writes asynchronously: wait until the lineage API lists the run as finished."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = CliRunner().invoke(
            app, ["lineage", "runs", "--address", stack.store_grpc_address, "--status", "finished"]
        )
        if run_id in result.output:
            return
        assert time.monotonic() < deadline, f"the store never recorded {run_id} as finished"
        time.sleep(0.5)


def test_the_report_of_a_finished_cpu_run_has_every_section_and_nothing_external(
    finished_run: tuple[Stack, str], tmp_path: Path
) -> None:
    stack, run_id = finished_run
    wait_finished_in_store(stack, run_id)
    target = tmp_path / "run.html"
    code, output = report(run_id, "--address", stack.store_grpc_address, "-o", str(target))
    assert code == 0, output
    html = target.read_text(encoding="utf-8")

    parsed = SectionPlots()
    parsed.feed(html)
    assert list(parsed.plots) == list(SECTIONS)
    assert parsed.plots["speedup"] >= 1 and parsed.plots["archive"] == 1 and parsed.plots["baselines"] == 1
    for empty in ("No correct, timed kernel", "The archive holds no elite", "No best kernel"):
        assert empty not in html, f"a finished run with a faster kernel shows: {empty}"
    assert re.search(r'class="headline">\d+\.\d\dx<', html)
    assert "kf_forward" in html  # the best kernel's source, with its entry point
    assert "PyTorch eager" in html and "torch.compile" in html
    assert external_references(html) == []
    assert set(re.findall(r"https?://[^\s\"'<>)]+", html)) <= {
        "http://www.w3.org/2000/svg",
        "http://www.w3.org/1999/xlink",
    }


def test_an_exported_run_renders_offline_to_the_same_page(
    finished_run: tuple[Stack, str], tmp_path: Path
) -> None:
    stack, run_id = finished_run
    wait_finished_in_store(stack, run_id)
    exported = tmp_path / "run.kfrun.tar.gz"
    result = CliRunner().invoke(
        app, ["lineage", "export", run_id, str(exported), "--address", stack.store_grpc_address]
    )
    assert result.exit_code == 0, result.output
    code, output = report(run_id, "--address", stack.store_grpc_address, "-o", str(tmp_path / "api.html"))
    assert code == 0, output
    code, output = report("--archive", str(exported), "-o", str(tmp_path / "file.html"))
    assert code == 0, output
    assert (tmp_path / "file.html").read_text() == (tmp_path / "api.html").read_text()
