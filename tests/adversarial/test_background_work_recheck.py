"""The background-work check convicts only an excess that reproduces (verification.py, "Background work").

One idle window over its allowance is what a busy host can bill to an honest unit (its OpenMP workers
parking just after the reply): the judge measures again at once and lets it pass. Work that keeps running
shows again in that re-check; work started after every call shows again in the next window. The honest
runner here has the CPU time of its threads inflated from the judge's side, window by window, so the rule
is exercised the same on a quiet and on a loaded host; a real bursting helper thread runs beside it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from attacks import ATTACKS, FAST, Arsenal, read_attack

from kernelfoundry.evaluation import EvaluationReport, reasons
from kernelfoundry.evaluation.backends import backend_for_device
from kernelfoundry.evaluation.engine import run_evaluation
from kernelfoundry.evaluation.runner_client import RunnerProcess

HERE = Path(__file__).resolve().parent
CONTROL = read_attack(ATTACKS / "cpu" / "control_fma.cpp")
TAIL_NS = 3_000_000  # what a CI host under a benchmark billed an honest control (2.6-2.9 ms)


class EveryWindowRunner(RunnerProcess):
    """The real runner, every idle window after a timed call watched (the rule's tests count windows)."""

    def __init__(self, argv: tuple[str, ...] | None = None) -> None:
        super().__init__(backend_for_device("cpu"), "cpu", *(() if argv is None else (argv,)))

    def watch_schedule(self, calls: int) -> None:
        self.watch_probability = 1.0


class InflatedRunner(EveryWindowRunner):
    """The real runner, whose threads besides the main one read TAIL_NS more CPU time from the watched
    windows in `windows` on (counted from 1): in those windows only, or, `lasting`, in every reading after."""

    def __init__(self, windows: set[int], lasting: bool = False) -> None:
        super().__init__()
        self.windows, self.lasting = windows, lasting
        self.window = 0
        self.inflating = False
        self.extra = 0

    def _observe_idle(self) -> None:
        if self._watch_idle and self._cpu_at_reply is not None:
            self.window += 1
            self.inflating = (self.inflating and self.lasting) or self.window in self.windows
        super()._observe_idle()

    def _cpu_now(self) -> tuple[int, int, int]:
        main, others, total = super()._cpu_now()
        if self.inflating:  # a counter that grew by TAIL_NS since the last reading
            self.extra += TAIL_NS
            self.inflating = self.lasting
        return main, others + self.extra, total + self.extra


def evaluate(arsenal: Arsenal, windows: set[int], lasting: bool = False) -> EvaluationReport:
    report, _ = run_evaluation(arsenal.request(CONTROL, FAST), lambda: InflatedRunner(windows, lasting))
    return report


def rechecked(report: EvaluationReport) -> list[str]:
    return [note for note in report.notes if note.startswith("background-work check:")]


def test_one_window_over_the_allowance_is_measured_again_and_passes(arsenal: Arsenal) -> None:
    report = evaluate(arsenal, windows={3})
    assert report.correct, f"{report.reason}: {report.message}"
    assert len(rechecked(report)) == 1, report.notes
    assert "measured again at once for 50 ms it was idle" in rechecked(report)[0]


def test_windows_over_the_allowance_apart_pass_each_on_its_own(arsenal: Arsenal) -> None:
    report = evaluate(arsenal, windows={2, 5, 9})
    assert report.correct, f"{report.reason}: {report.message}"
    assert len(rechecked(report)) == 3, report.notes


def test_work_still_running_in_the_recheck_is_background_work(arsenal: Arsenal) -> None:
    report = evaluate(arsenal, windows={3}, lasting=True)
    assert report.reason == reasons.BACKGROUND_WORK, report.message
    assert "in a second window of 50 ms" in report.message


def test_windows_over_the_allowance_after_two_calls_in_a_row_are_background_work(arsenal: Arsenal) -> None:
    report = evaluate(arsenal, windows={4, 5})
    assert report.reason == reasons.BACKGROUND_WORK, report.message
    assert "as it had after the call before (two windows in a row)" in report.message


def test_a_helper_thread_that_works_after_every_call_is_background_work(arsenal: Arsenal) -> None:
    """Real bursts of 8 ms of CPU after every reply, each over before the re-check window ends."""
    argv = (sys.executable, str(HERE / "bursting_runner.py"))
    report, _ = run_evaluation(arsenal.request(CONTROL, FAST), lambda: EveryWindowRunner(argv))
    assert report.reason == reasons.BACKGROUND_WORK, f"{report.reason}: {report.message}"


def test_bursts_after_every_call_are_caught_with_windows_watched_at_random(arsenal: Arsenal) -> None:
    """The judge's own sampling (verification.watch_probability): the same bursts, convicted at the
    first watched window's re-check or at the window after it, which is watched whatever the draw."""
    argv = (sys.executable, str(HERE / "bursting_runner.py"))
    report, _ = run_evaluation(
        arsenal.request(CONTROL, FAST), lambda: RunnerProcess(backend_for_device("cpu"), "cpu", argv)
    )
    assert report.reason == reasons.BACKGROUND_WORK, f"{report.reason}: {report.message}"


def test_an_honest_unit_has_a_share_of_its_windows_watched(arsenal: Arsenal) -> None:
    report, _ = run_evaluation(
        arsenal.request(CONTROL, FAST), lambda: RunnerProcess(backend_for_device("cpu"), "cpu")
    )
    assert report.correct, f"{report.reason}: {report.message}"
    counters = report.counters
    timed = counters["timed_runs"] + counters["warmup_runs"] + counters["screen_runs"]
    # at least the cross-check's batches (every one watched but the last, whose window ends the runner)
    assert 2 <= counters["watched_idle_windows"] <= timed + 6, counters
