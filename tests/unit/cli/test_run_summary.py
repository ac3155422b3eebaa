"""What `kernelfoundry run` prints and returns as JSON about a finished run: its per-shape settings and
what its generation cost."""

from __future__ import annotations

from rich.console import Console

from kernelfoundry.cli.run import print_summary, summary_dict, tuned_table
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


def with_usage(final: run_pb2.RunProgress) -> run_pb2.RunProgress:
    final.usage.CopyFrom(
        run_pb2.GenerationTotals(requests=5, prompt_tokens=12000, completion_tokens=3000, cost_usd=0.081)
    )
    final.usage_by_generator["local"].CopyFrom(
        run_pb2.GenerationTotals(requests=3, prompt_tokens=12000, completion_tokens=3000, cost_usd=0.081)
    )
    final.usage_by_generator["heuristic"].CopyFrom(run_pb2.GenerationTotals(requests=2))
    return final


def test_the_json_summary_carries_the_run_s_tokens_and_cost_per_generator() -> None:
    usage = summary_dict(with_usage(progress()))["usage"]
    assert usage["requests"] == 5 and usage["prompt_tokens"] == 12000 and usage["cost_usd"] == 0.081
    assert usage["by_generator"]["local"] == {
        "requests": 3,
        "prompt_tokens": 12000,
        "completion_tokens": 3000,
        "cost_usd": 0.081,
    }
    assert usage["by_generator"]["heuristic"]["requests"] == 2


def printed(final: run_pb2.RunProgress) -> str:
    console = Console(width=400, record=True)
    print_summary(console, summary_dict(final), final)
    return console.export_text()


def test_the_printed_summary_says_what_generation_cost_for_a_run_with_or_without_a_kernel() -> None:
    failed = with_usage(progress())
    failed.status = run_pb2.RUN_STATUS_FAILED
    text = printed(failed)
    assert "no correct kernel found" in text
    assert "generation: 12,000 prompt + 3,000 completion tokens, $0.0810 over 5 requests" in text
    assert "local: 12,000 prompt + 3,000 completion tokens, $0.0810 over 3 requests" in text
    completed = with_usage(progress())
    completed.best.candidate_id = "c1"
    completed.iteration = 2
    assert "generation: 12,000 prompt" in printed(completed)


def test_a_run_that_spent_no_token_prints_no_cost_line() -> None:
    final = progress()
    final.usage.requests = 4  # the heuristic answered everything
    assert "generation:" not in printed(final)
