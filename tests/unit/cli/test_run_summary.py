"""What `kernelfoundry run` prints and returns as JSON about a finished run's per-shape settings."""

from __future__ import annotations

from rich.console import Console

from kernelfoundry.cli.run import summary_dict, tuned_table
from kernelfoundry.v1 import run_pb2


def progress() -> run_pb2.RunProgress:
    final = run_pb2.RunProgress(run_id="run-1", task_name="softmax", status=run_pb2.RUN_STATUS_COMPLETED)
    final.tuned.add(shape="small", candidate_id="c1", params={"BLOCK": "128"}, runtime_ms=0.1, hardware="cpu")
    final.tuned.add(shape="large", candidate_id="c2", params={"BLOCK": "512"}, runtime_ms=2.5, hardware="cpu")
    return final


def test_the_json_summary_lists_the_best_setting_of_every_shape() -> None:
    tuned = summary_dict(progress())["tuned_per_shape"]
    assert tuned == [
        {
            "shape": "small",
            "candidate_id": "c1",
            "params": {"BLOCK": "128"},
            "runtime_ms": 0.1,
            "hardware": "cpu",
        },
        {
            "shape": "large",
            "candidate_id": "c2",
            "params": {"BLOCK": "512"},
            "runtime_ms": 2.5,
            "hardware": "cpu",
        },
    ]


def test_the_table_shows_each_shape_with_its_kernel_and_setting() -> None:
    console = Console(width=120, record=True)
    console.print(tuned_table(progress()))
    text = console.export_text()
    assert "small" in text and "c1" in text and "BLOCK=128" in text
    assert "large" in text and "c2" in text and "BLOCK=512" in text
