"""Runs a freshly started stack resumed are named, each with the command that cancels it."""

from __future__ import annotations

from rich.console import Console

from kernelfoundry.cli.resumed import announce_resumed, resumed_lines
from kernelfoundry.stack.supervisor import free_port
from kernelfoundry.v1 import lineage_pb2


def test_each_resumed_run_is_named_with_how_to_cancel_it() -> None:
    runs = [lineage_pb2.RunRecord(run_id="run-0123456789ab", task_name="softmax", hardware="cpu.x86_64")]
    (line,) = resumed_lines(runs)
    assert "resumed run run-0123456789ab (softmax on cpu.x86_64)" in line
    assert "`kernelfoundry cancel run-0123456789ab`" in line


def test_an_unreachable_lineage_api_is_said_and_not_fatal() -> None:
    console = Console(record=True, width=200)
    assert announce_resumed(console, f"127.0.0.1:{free_port()}", timeout_s=0.2) == []
    assert "could not list resumed runs" in console.export_text()
