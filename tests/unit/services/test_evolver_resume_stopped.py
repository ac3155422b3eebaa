"""ResumeRun: a stopped run is checked before anything changes, then resumed by the production restore.

Driven without a server: the lineage, the serving probe and the task check are fakes with the real
interfaces; refusals are the ApiErrors the edge turns into status codes.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import grpc
import pytest

from kernelfoundry.api.errors import ApiError
from kernelfoundry.api.limits import ApiLimits
from kernelfoundry.api.serving import ServingProbe
from kernelfoundry.bus import subjects
from kernelfoundry.services.evolver.resume import elapsed_before_stop, resume_stopped_run
from kernelfoundry.services.evolver.runs import RunCoordinator
from kernelfoundry.tasks.model import Task, TaskError
from kernelfoundry.v1 import build_pb2, lineage_pb2, run_pb2

from .test_evolver_resume import history_of
from .test_evolver_runs import evaluated, kernel, seed_generation, start

CREATED = datetime(2020, 1, 1, tzinfo=UTC)
NOW = 2_000_000_000.0


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._code.name


class FakeLineage:
    """The store as resuming reads it (kernelfoundry.client.LineageClient's two calls)."""

    def __init__(
        self, history: lineage_pb2.GetRunHistoryResponse | None, error: grpc.StatusCode | None = None
    ):
        self.history = history
        self.error = error
        self.histories_read = 0

    async def get_run(self, run_id: str, timeout_s: float | None = None) -> lineage_pb2.RunRecord:
        if self.error is not None:
            raise FakeRpcError(self.error)
        if self.history is None or self.history.run.run_id != run_id:
            raise FakeRpcError(grpc.StatusCode.NOT_FOUND)
        return self.history.run

    async def run_history(self, run_id: str) -> lineage_pb2.GetRunHistoryResponse:
        self.histories_read += 1
        assert self.history is not None
        return self.history


class TaskCheck:
    def __init__(self, error: TaskError | None = None) -> None:
        self.error = error
        self.checked: list[tuple[str, str]] = []

    async def __call__(self, task: Task, hardware: str) -> None:
        self.checked.append((task.name, hardware))
        if self.error is not None:
            raise self.error


def probe(
    hardware: tuple[str, ...] = ("cpu.x86_64",), generators: tuple[str, ...] = ("heuristic",)
) -> ServingProbe:
    async def no_consumers() -> list[str]:
        return []

    return ServingProbe(
        no_consumers, configured_hardware=frozenset(hardware), configured_generators=frozenset(generators)
    )


def stopped_history(tmp_path: Path) -> lineage_pb2.GetRunHistoryResponse:
    """An imported unfinished run: one candidate evaluated, one whose work was on another deployment's bus."""
    runs, out = start(tmp_path / "elsewhere", iterations=4)
    first, _second = seed_generation(runs, out, kernel(1), kernel(2))
    runs.on_evaluated(evaluated(first, 1.5))
    history = history_of(runs)
    history.run.status = "stopped"
    history.run.created_at.FromDatetime(CREATED)
    for candidate in history.candidates:
        candidate.created_at.FromDatetime(datetime.fromtimestamp(CREATED.timestamp() + 100, UTC))
    return history


def with_config(history: lineage_pb2.GetRunHistoryResponse, **changes: object) -> None:
    config = json.loads(history.run.config_json)
    config.update(changes)
    history.run.config_json = json.dumps(config)


def resume(
    runs: RunCoordinator,
    lineage: FakeLineage,
    *,
    check: TaskCheck | None = None,
    served: ServingProbe | None = None,
    limits: ApiLimits | None = None,
    run_id: str = "run-1",
):  # type: ignore[no-untyped-def]
    return asyncio.run(
        resume_stopped_run(
            runs,
            run_id,
            lineage,
            served or probe(),
            limits or ApiLimits(),
            check or TaskCheck(),
            now=lambda: NOW,
        )
    )


def refused(call, code: grpc.StatusCode, reason: str) -> ApiError:  # type: ignore[no-untyped-def]
    with pytest.raises(ApiError) as caught:
        call()
    assert caught.value.code == code, caught.value
    assert caught.value.reason == reason, caught.value
    return caught.value


def test_a_stopped_run_resumes_where_its_lineage_left_off_and_resends_unfinished_work(tmp_path: Path) -> None:
    history = stopped_history(tmp_path)
    runs = RunCoordinator(tmp_path / "here")
    check = TaskCheck()
    out = resume(runs, FakeLineage(history), check=check)
    assert out[0].subject == subjects.RUN_RESUMED
    resumed = out[0].message
    assert isinstance(resumed, run_pb2.RunResumed) and resumed.run_id == "run-1" and resumed.resumed_at == NOW
    compiles = [o.message for o in out if isinstance(o.message, build_pb2.CompileCandidate)]
    unevaluated = {c.candidate_id for c in history.candidates} - {e.candidate_id for e in history.evaluations}
    assert {c.candidate_id for c in compiles} == unevaluated
    run = runs.runs["run-1"]
    assert run.active and run.generated == 2 and run.correct == 1
    assert check.checked == [("relu", "cpu.x86_64")]
    # the run's clock continues from what it had used (100 s), not from its creation years ago
    assert run.started_at == pytest.approx(NOW - 100.0)
    assert elapsed_before_stop(history) == pytest.approx(100.0)


def test_a_run_the_lineage_does_not_hold_is_not_found(tmp_path: Path) -> None:
    runs = RunCoordinator(tmp_path)
    refused(lambda: resume(runs, FakeLineage(None)), grpc.StatusCode.NOT_FOUND, "run_not_found")
    assert runs.runs == {}


def test_a_store_that_does_not_answer_is_unavailable(tmp_path: Path) -> None:
    lineage = FakeLineage(None, error=grpc.StatusCode.UNAVAILABLE)
    refused(
        lambda: resume(RunCoordinator(tmp_path), lineage), grpc.StatusCode.UNAVAILABLE, "store_unavailable"
    )


@pytest.mark.parametrize("status", ["running", "finished", "failed", "cancelled"])
def test_only_a_stopped_run_is_resumed(tmp_path: Path, status: str) -> None:
    history = stopped_history(tmp_path)
    history.run.status = status
    runs = RunCoordinator(tmp_path / "here")
    check = TaskCheck()
    lineage = FakeLineage(history)
    error = refused(
        lambda: resume(runs, lineage, check=check), grpc.StatusCode.FAILED_PRECONDITION, "run_not_stopped"
    )
    assert status in error.message and "stopped" in error.message
    assert runs.runs == {} and check.checked == [] and lineage.histories_read == 0


def test_a_run_already_running_here_is_refused(tmp_path: Path) -> None:
    history = stopped_history(tmp_path)
    runs = RunCoordinator(tmp_path / "here")
    resume(runs, FakeLineage(history))
    refused(lambda: resume(runs, FakeLineage(history)), grpc.StatusCode.FAILED_PRECONDITION, "run_running")


@pytest.mark.parametrize(
    ("config", "served", "reason", "needle"),
    [
        ({"hardware": "cuda.h200"}, probe(), "unserved_hardware", "cuda.h200"),
        ({"hardware": "quantum.qpu"}, probe(), "unknown_hardware", "quantum.qpu"),
        ({"hardware": ""}, probe(), "unknown_hardware", "hardware"),
        ({"generator": "nope"}, probe(), "unserved_generator", "nope"),
        ({}, probe(generators=()), "unserved_generator", "heuristic"),
        ({"population": 65}, probe(), "limit_exceeded", "KF_API_MAX_POPULATION"),
    ],
)
def test_what_this_deployment_cannot_serve_is_a_failed_precondition_naming_why(
    tmp_path: Path, config: dict[str, object], served: ServingProbe, reason: str, needle: str
) -> None:
    history = stopped_history(tmp_path)
    with_config(history, **config)
    runs = RunCoordinator(tmp_path / "here")
    check = TaskCheck()
    error = refused(
        lambda: resume(runs, FakeLineage(history), check=check, served=served),
        grpc.StatusCode.FAILED_PRECONDITION,
        reason,
    )
    assert needle in error.message
    assert runs.runs == {} and check.checked == []


def test_a_task_that_does_not_validate_here_is_a_failed_precondition(tmp_path: Path) -> None:
    history = stopped_history(tmp_path)
    runs = RunCoordinator(tmp_path / "here")
    check = TaskCheck(TaskError("reference_error", "the reference raised ValueError"))
    error = refused(
        lambda: resume(runs, FakeLineage(history), check=check),
        grpc.StatusCode.FAILED_PRECONDITION,
        "invalid_task",
    )
    assert "reference_error" in error.message
    assert runs.runs == {}


def test_a_stored_task_that_breaks_the_contract_is_refused_before_it_is_run(tmp_path: Path) -> None:
    history = stopped_history(tmp_path)
    config = json.loads(history.run.config_json)
    config["task"]["tolerance"] = {"atol": "NaN", "rtol": 1e-3}
    history.run.config_json = json.dumps(config)
    check = TaskCheck()
    error = refused(
        lambda: resume(RunCoordinator(tmp_path / "here"), FakeLineage(history), check=check),
        grpc.StatusCode.FAILED_PRECONDITION,
        "invalid_task",
    )
    assert "tolerance.atol" in error.message and check.checked == []


def test_an_evolver_running_its_maximum_is_resource_exhausted(tmp_path: Path) -> None:
    history = stopped_history(tmp_path)
    runs, _ = start(tmp_path / "busy")  # one run in progress already
    runs.runs["run-busy"] = runs.runs.pop("run-1")
    refused(
        lambda: resume(runs, FakeLineage(history), limits=ApiLimits(max_active_runs=1)),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "too_many_runs",
    )
    assert "run-1" not in runs.runs


def test_a_history_that_does_not_rebuild_is_refused_and_nothing_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelfoundry.services.evolver import resume as resume_module

    real = resume_module.restore_run

    def half_restored(coordinator: RunCoordinator, history, started_at=None):  # type: ignore[no-untyped-def]
        real(coordinator, history, started_at)  # the run is registered, then a record breaks the rebuild
        raise KeyError("a candidate of another shape")

    monkeypatch.setattr(resume_module, "restore_run", half_restored)
    runs = RunCoordinator(tmp_path / "here")
    error = refused(
        lambda: resume(runs, FakeLineage(stopped_history(tmp_path))),
        grpc.StatusCode.FAILED_PRECONDITION,
        "corrupt_record",
    )
    assert "could not be rebuilt" in error.message and "KeyError" not in error.message
    assert runs.runs == {}
