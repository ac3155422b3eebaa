"""`kernelfoundry run`: argument checks, JSON errors, Ctrl-C cancel and detach, and the printed summary."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from kernelfoundry.cli.main import app
from kernelfoundry.cli.output import CliError, rejection, stdout_console
from kernelfoundry.cli.run import (
    archive_map,
    check_arguments,
    detach_hint,
    follow,
    print_summary,
    summary_dict,
)
from kernelfoundry.v1 import run_pb2

ROOT = Path(__file__).resolve().parents[3]
TASK = str(ROOT / "tasks" / "level2_elementwise_chain.py")


@pytest.mark.parametrize("iterations", [0, -1])
def test_a_budget_below_one_iteration_is_refused(iterations: int) -> None:
    with pytest.raises(CliError, match=f"--iterations {iterations}") as error:
        check_arguments(iterations, 4, "cpu")
    assert error.value.reason == "bad_argument"


def test_population_and_backend_are_checked() -> None:
    with pytest.raises(CliError, match="--population 0"):
        check_arguments(None, 0, "cpu")
    with pytest.raises(CliError, match="--backend tpu"):
        check_arguments(None, 4, "tpu")
    check_arguments(None, 4, "cpu")  # no budget given: the task's own


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["--iterations", "-1"], "bad_argument"),
        (["--iterations", "0"], "bad_argument"),
        (["--backend", "tpu"], "bad_argument"),
    ],
)
def test_with_json_a_bad_argument_is_a_json_error_and_exit_2(args: list[str], reason: str) -> None:
    result = CliRunner().invoke(app, ["run", TASK, *args, "--json"])
    assert result.exit_code == 2
    assert json.loads(result.stdout)["error"]["reason"] == reason


def test_with_json_a_missing_task_is_a_json_error() -> None:
    result = CliRunner().invoke(app, ["run", "no/such/task.py", "--json"])
    assert result.exit_code == 2
    error = {"reason": "not_found", "message": "no task at no/such/task.py"}
    assert json.loads(result.stdout) == {"error": error}


def test_without_json_the_error_names_the_reason_on_stderr() -> None:
    result = CliRunner().invoke(app, ["run", TASK, "--iterations", "-1"])
    assert result.exit_code == 2
    assert "bad_argument" in result.stderr and "--iterations -1" in result.stderr
    assert result.stdout == ""


def test_a_server_rejection_keeps_its_reason_code() -> None:
    error = rejection("bad_inputs: shape `default`: get_inputs() returned a Tensor, not a list of inputs")
    assert error.reason == "bad_inputs" and error.message.startswith("shape `default`")
    assert rejection("something odd happened").reason == "task_rejected"


class FakeClient:
    """Streams each of `streams` in turn; a None in a stream is the user pressing Ctrl-C."""

    def __init__(
        self, *streams: list[run_pb2.RunProgress | None], cancel_result: run_pb2.RunProgress
    ) -> None:
        self.streams = list(streams)
        self.cancel_result = cancel_result
        self.cancelled: list[str] = []

    def progress(self, run_id: str) -> Iterator[run_pb2.RunProgress]:
        for update in self.streams.pop(0):
            if update is None:
                raise KeyboardInterrupt
            yield update

    def get_run(self, run_id: str) -> run_pb2.RunProgress:
        return self.cancel_result

    def cancel(self, run_id: str) -> run_pb2.RunProgress:
        self.cancelled.append(run_id)
        return self.cancel_result


def running() -> run_pb2.RunProgress:
    return run_pb2.RunProgress(run_id="run-1", status=run_pb2.RUN_STATUS_RUNNING)


def test_ctrl_c_cancels_the_run_and_waits_for_its_end() -> None:
    cancelled = run_pb2.RunProgress(run_id="run-1", status=run_pb2.RUN_STATUS_CANCELLED, message="cancelled")
    client = FakeClient([running(), None], cancel_result=cancelled)
    console = Console(record=True, width=200)
    followed = follow(client, "run-1", console, quiet=True, detach_hint="hint")
    assert client.cancelled == ["run-1"]
    assert followed.interrupted and not followed.detached
    assert followed.progress.status == run_pb2.RUN_STATUS_CANCELLED
    assert "cancelling run run-1" in console.export_text()


def test_a_second_ctrl_c_detaches_and_says_how_to_resume_or_cancel() -> None:
    still_running = running()  # a cancel that has not taken effect yet: keep following
    client = FakeClient([running(), None], [None], cancel_result=still_running)
    console = Console(record=True, width=300)
    followed = follow(client, "run-1", console, quiet=True, detach_hint=detach_hint("run-1", embedded=True))
    assert followed.detached and followed.interrupted
    text = console.export_text()
    assert "detached from run run-1" in text
    assert "kernelfoundry cancel run-1" in text and "resumes it" in text


def finished(hardware: str = "cpu.x86_64") -> run_pb2.RunProgress:
    progress = run_pb2.RunProgress(
        run_id="run-1",
        task_name="chain",
        status=run_pb2.RUN_STATUS_COMPLETED,
        iteration=4,
        candidates_generated=21,
        candidates_correct=21,
        best_speedup=6.2,
        config=run_pb2.RunConfig(hardware=hardware),
    )
    progress.best.candidate_id = "c7"
    progress.best.path = "/state/runs/run-1/best.cpp"
    progress.archive.add(candidate_id="c7", speedup=6.2).descriptors.parallelism = 3
    progress.speedup.CopyFrom(
        run_pb2.RunSpeedup(
            candidate_id="c7",
            speedup=6.2,
            kernel_ms=4.0,
            kernel_spread_ms=0.05,
            eager_ms=24.8,
            eager_spread_ms=0.9,
            eager_samples=22,
            eager_outliers_ms=[31.5],
            retimed=True,
            side_by_side_eager_ms=25.0,
            side_by_side_speedup=6.25,
        )
    )
    return progress


def test_the_summary_shows_the_one_figure_with_both_spreads_and_the_outliers() -> None:
    progress = finished()
    out = Console(record=True, width=400)
    print_summary(out, summary_dict(progress), progress)
    text = out.export_text()
    assert "best kernel: /state/runs/run-1/best.cpp (candidate c7)" in text
    assert "speedup over PyTorch eager: 6.20x (kernel 4.0000 ms, IQR 0.0500, re-timed beside eager;" in text
    assert "eager 24.8000 ms, median of 22 timings, IQR 0.9000; 1 outlier(s) left out: 31.500 ms)" in text
    assert "side by side: eager 25.0000 ms (6.25x)" in text
    assert "after 4 iterations, 21 correct of 21 candidates" in text


def test_the_json_summary_carries_the_figure_and_what_it_was_computed_from() -> None:
    summary = summary_dict(finished())
    assert summary["best_speedup"] == 6.2
    assert summary["speedup"]["eager_outliers_ms"] == [31.5] and summary["speedup"]["retimed"] is True


def test_a_cpu_archive_is_described_in_cpu_words_and_a_gpu_one_in_gpu_words() -> None:
    def render(hardware: str) -> str:
        console = Console(record=True, width=300)
        console.print(archive_map(finished(hardware)))
        return console.export_text()

    cpu = render("cpu.x86_64")
    assert "atomics / critical" in cpu and "cache blocking" in cpu
    assert "warp" not in cpu and "shared-memory" not in cpu
    gpu = render("cuda.h200")
    assert "atomics: 6.20x" in gpu and "shared-memory tiles" in gpu


def test_piped_output_is_not_cut_at_80_columns(tmp_path: Path) -> None:
    with open(tmp_path / "out.txt", "w") as stream:
        console = stdout_console(stream)
        console.print("x" * 150)
    assert (tmp_path / "out.txt").read_text().strip() == "x" * 150


def test_cancel_without_a_reachable_api_says_how_to_start_one_as_json() -> None:
    from kernelfoundry.stack.supervisor import free_port

    address = f"127.0.0.1:{free_port()}"
    result = CliRunner().invoke(app, ["cancel", "run-0123456789ab", "--address", address, "--json"])
    assert result.exit_code == 2
    error = json.loads(result.stdout)["error"]
    assert error["reason"] == "unreachable" and "kernelfoundry up" in error["message"]


class FakeApi:
    """Stands in for KernelFoundryClient inside `kernelfoundry run`: one run that ends as `final`."""

    final: run_pb2.RunProgress

    def __init__(self, address: str) -> None:
        self.address = address

    def ready(self, timeout_s: float = 1.0) -> bool:
        return True

    def submit(self, task: object, config: run_pb2.RunConfig) -> str:
        return "run-1"

    def progress(self, run_id: str) -> Iterator[run_pb2.RunProgress]:
        yield self.final

    def get_run(self, run_id: str) -> run_pb2.RunProgress:
        return self.final

    def close(self) -> None:
        pass


def no_correct_kernel() -> run_pb2.RunProgress:
    return run_pb2.RunProgress(
        run_id="run-1",
        status=run_pb2.RUN_STATUS_FAILED,
        candidates_generated=3,
        candidates_failed=3,
        message="no correct kernel among 3 candidates (wrong_result x3); budget reached: iterations",
    )


def test_a_run_without_a_correct_kernel_exits_1_with_its_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FakeApi, "final", no_correct_kernel(), raising=False)
    monkeypatch.setattr("kernelfoundry.cli.run.KernelFoundryClient", FakeApi)
    result = CliRunner().invoke(app, ["run", TASK, "--iterations", "1"])
    assert result.exit_code == 1
    assert "no correct kernel among 3 candidates (wrong_result x3)" in result.stderr
    with_json = CliRunner().invoke(app, ["run", TASK, "--iterations", "1", "--json"])
    assert with_json.exit_code == 1
    summary = json.loads(with_json.stdout)
    assert summary["status"] == "failed" and "wrong_result x3" in summary["message"]


def test_a_completed_run_exits_0(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FakeApi, "final", finished(), raising=False)
    monkeypatch.setattr("kernelfoundry.cli.run.KernelFoundryClient", FakeApi)
    result = CliRunner().invoke(app, ["run", TASK, "--iterations", "1"])
    assert result.exit_code == 0, result.output
    assert "speedup over PyTorch eager: 6.20x" in result.stdout


def test_ctrl_c_works_even_when_started_with_sigint_ignored_and_handlers_come_back() -> None:
    import signal

    from kernelfoundry.cli.run import signals_taken

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)  # what a shell's `cmd &` does
    try:
        with signals_taken():
            assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
            with pytest.raises(SystemExit) as terminated:
                signal.raise_signal(signal.SIGTERM)
            assert terminated.value.code == 143
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)
