"""End to end: the public gRPC APIs refuse what they cannot serve, through the real servers of the stack.

One stack for the module. Each failure the hostile-client run of issue 23 found is sent again: each is
refused with the right status and a message that names the field and the rule (never UNKNOWN, never a
stack trace, an exception class or a server path), no run is created and nothing is written outside the
store's own folders. Then: an unfinished run imported with hardware nothing serves, and a poisoned running
run in the lineage, do not stop a restarted evolver; the services' memory does not drift under thousands of
bad requests; ResumeRun continues an imported unfinished run to a correct end and refuses, before anything
changes, runs it cannot continue; and a normal small run afterwards completes correctly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import io
import json
import tarfile
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf.json_format import MessageToDict

from kernelfoundry.codec import task_to_proto
from kernelfoundry.lineage import RunRecord
from kernelfoundry.lineage.connection import open_repository
from kernelfoundry.lineage.export import export_run_bytes
from kernelfoundry.lineage.sqlite_repository import SqliteLineageRepository
from kernelfoundry.stack.hardware import cpu_target
from kernelfoundry.stack.supervisor import Stack
from kernelfoundry.v1 import (
    lineage_pb2,
    lineage_pb2_grpc,
    run_pb2,
    service_pb2,
    service_pb2_grpc,
    task_pb2,
)

from .test_stack import FAST_ENV, chain_task, config, wait_finished, wait_lineage_complete

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

INT32_MAX = 2**31 - 1
MAX_REQUEST_BYTES = 1024 * 1024
MAX_ARCHIVE_BYTES = 4 * 1024 * 1024
MAX_DECOMPRESSED_BYTES = 8 * 1024 * 1024
EDGE_ENV = {
    **FAST_ENV,
    "KF_API_MAX_REQUEST_BYTES": str(MAX_REQUEST_BYTES),
    "KF_API_MAX_ARCHIVE_BYTES": str(MAX_ARCHIVE_BYTES),
    "KF_API_MAX_DECOMPRESSED_BYTES": str(MAX_DECOMPRESSED_BYTES),
}
EVOLVER = "/kernelfoundry.v1.KernelFoundryService/"
STORE = "/kernelfoundry.v1.LineageService/"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(state_dir=tmp_path_factory.mktemp("stack"), hardware=[cpu_target()], extra_env=EDGE_ENV)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def evolver(stack: Stack) -> Iterator[service_pb2_grpc.KernelFoundryServiceStub]:
    with grpc.insecure_channel(stack.grpc_address) as channel:
        yield service_pb2_grpc.KernelFoundryServiceStub(channel)


@pytest.fixture(scope="module")
def store(stack: Stack) -> Iterator[lineage_pb2_grpc.LineageServiceStub]:
    options = [("grpc.max_send_message_length", 64 * 1024 * 1024)]
    with grpc.insecure_channel(stack.store_grpc_address, options=options) as channel:
        yield lineage_pb2_grpc.LineageServiceStub(channel)


def refused(call: Callable[[], Any], code: grpc.StatusCode, *needles: str, stack: Stack | None = None) -> str:
    """The call fails with `code`; its message has every needle and nothing of the server's internals."""
    with pytest.raises(grpc.RpcError) as caught:
        result = call()
        if hasattr(result, "__next__"):  # a server stream fails when read
            list(result)
    error = caught.value
    details = error.details() or ""
    assert error.code() == code, f"{error.code()} {details}"
    for needle in needles:
        assert needle in details, details
    for leak in ("Traceback", 'File "', "Error(", "Exception", "/tmp/", "/work/", "site-packages"):
        assert leak not in details, details
    if stack is not None:
        assert str(stack.state_dir) not in details
    return details


def stored_runs(stack: Stack) -> list[RunRecord]:
    async def read() -> list[RunRecord]:
        repo = await open_repository(f"sqlite:///{stack.state_dir / 'lineage.db'}")
        try:
            return await repo.list_runs(limit=None)
        finally:
            await repo.close()

    return asyncio.run(read())


def run_folders(stack: Stack) -> set[str]:
    runs = stack.state_dir / "runs"
    return {p.name for p in runs.iterdir()} if runs.exists() else set()


def submission(**config_fields: Any) -> service_pb2.SubmitRunRequest:
    cfg = config(iterations=1, population=2)
    for name, value in config_fields.items():
        setattr(cfg, name, value)
    return service_pb2.SubmitRunRequest(task=task_to_proto(chain_task()), config=cfg)


def raw(channel_address: str, method: str, payload: bytes) -> grpc.RpcError:
    with grpc.insecure_channel(channel_address) as channel:
        call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as caught:
            call(payload, timeout=30)
    return caught.value


def archive_of(run: RunRecord) -> bytes:
    """A well-formed archive of one run, whatever its id, hardware and status say."""

    async def build() -> bytes:
        repo = await SqliteLineageRepository.open(":memory:")
        try:
            await repo.save_run(run)
            data, _ = await export_run_bytes(repo, run.run_id)
            return data
        finally:
            await repo.close()

    return asyncio.run(build())


def record(run_id: str, status: str = "running", hardware: str = "cpu.x86_64") -> RunRecord:
    return RunRecord(
        run_id=run_id,
        task_name="imported",
        hardware=hardware,
        status=status,
        config={"hardware": hardware, "generator": "heuristic", "iterations": 1, "population": 2},
        created_at=datetime(2026, 11, 1, tzinfo=UTC),
    )


def rss_kib(stack: Stack, service: str) -> int:
    process = stack.service(service).process
    assert process is not None
    for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_every_count_at_its_types_maximum_is_refused_within_a_second(stack: Stack, evolver: Any) -> None:
    before = (len(stored_runs(stack)), run_folders(stack))
    request = submission(islands=INT32_MAX, population=INT32_MAX, iterations=INT32_MAX, seed=2**63 - 1)
    request.task.budget.iterations = INT32_MAX
    request.task.budget.evaluations = INT32_MAX
    request.task.budget.patience = INT32_MAX
    request.task.seeds = INT32_MAX
    started = time.monotonic()
    details = refused(lambda: evolver.SubmitRun(request, timeout=30), grpc.StatusCode.INVALID_ARGUMENT)
    assert time.monotonic() - started < 1.0
    for field in ("config.islands", "config.population", "config.iterations", "task.seeds"):
        assert field in details
    assert (len(stored_runs(stack)), run_folders(stack)) == before
    assert stack.service("evolver").alive()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"iterations": -1}, "config.iterations"),
        ({"population": -3}, "config.population"),
        ({"islands": -2}, "config.islands"),
        ({"generator": "nope.nope"}, "config.generator"),
        ({"generator": "../../x"}, "config.generator"),
        ({"generator": "heu\x00ristic"}, "config.generator"),
        ({"hardware": "cpu.x86_64.*"}, "config.hardware"),
    ],
)
def test_malformed_run_configs_are_invalid_argument_and_create_nothing(
    stack: Stack, evolver: Any, change: dict[str, Any], field: str
) -> None:
    before = len(stored_runs(stack))
    refused(
        lambda: evolver.SubmitRun(submission(**change), timeout=30), grpc.StatusCode.INVALID_ARGUMENT, field
    )
    assert len(stored_runs(stack)) == before


def test_nan_tolerances_and_budgets_are_refused(stack: Stack, evolver: Any) -> None:
    request = submission()
    request.task.tolerance.CopyFrom(task_pb2.Tolerance(atol=float("nan"), rtol=float("inf")))
    request.task.budget.wall_time_s = float("nan")
    details = refused(lambda: evolver.SubmitRun(request, timeout=30), grpc.StatusCode.INVALID_ARGUMENT)
    for field in ("task.tolerance.atol", "task.tolerance.rtol", "task.budget.wall_time_s"):
        assert field in details
    assert "finite" in details


def test_hardware_and_generators_nothing_serves_are_refused_naming_what_is_served(
    stack: Stack, evolver: Any
) -> None:
    before = len(stored_runs(stack))
    details = refused(
        lambda: evolver.SubmitRun(submission(hardware="cuda.h200"), timeout=30),
        grpc.StatusCode.FAILED_PRECONDITION,
        "unserved_hardware",
        "cuda.h200",
    )
    assert cpu_target().execute in details
    refused(
        lambda: evolver.SubmitRun(submission(generator="nope"), timeout=30),
        grpc.StatusCode.FAILED_PRECONDITION,
        "unserved_generator",
        "heuristic",
    )
    assert len(stored_runs(stack)) == before


def test_a_run_beyond_a_configured_limit_names_the_limit(evolver: Any) -> None:
    refused(
        lambda: evolver.SubmitRun(submission(population=65), timeout=30),
        grpc.StatusCode.INVALID_ARGUMENT,
        "KF_API_MAX_POPULATION",
        "64",
    )


@pytest.mark.parametrize("run_id", ["/etc/passwd", "../run-1", "run-1\x00", "run-" + "a" * 100_000, ""])
def test_run_ids_that_are_not_run_ids_are_refused_by_every_method(
    stack: Stack, evolver: Any, store: Any, run_id: str
) -> None:
    calls = [
        lambda: evolver.GetRun(service_pb2.GetRunRequest(run_id=run_id), timeout=30),
        lambda: evolver.CancelRun(service_pb2.CancelRunRequest(run_id=run_id), timeout=30),
        lambda: evolver.GetBestKernel(service_pb2.GetBestKernelRequest(run_id=run_id), timeout=30),
        lambda: evolver.StreamRunProgress(service_pb2.StreamRunProgressRequest(run_id=run_id), timeout=30),
        lambda: store.ExportRun(lineage_pb2.ExportRunRequest(run_id=run_id), timeout=30),
        lambda: store.GetRunHistory(lineage_pb2.GetRunHistoryRequest(run_id=run_id), timeout=30),
        lambda: store.GetRunRecord(lineage_pb2.GetRunRecordRequest(run_id=run_id), timeout=30),
        lambda: evolver.ResumeRun(service_pb2.ResumeRunRequest(run_id=run_id), timeout=30),
    ]
    for call in calls:
        refused(call, grpc.StatusCode.INVALID_ARGUMENT, "run_id", stack=stack)


def test_an_unknown_but_well_formed_run_is_not_found(evolver: Any, store: Any) -> None:
    refused(
        lambda: evolver.GetRun(service_pb2.GetRunRequest(run_id="run-0123456789ab")),
        grpc.StatusCode.NOT_FOUND,
    )
    refused(
        lambda: store.ExportRun(lineage_pb2.ExportRunRequest(run_id="run-0123456789ab")),
        grpc.StatusCode.NOT_FOUND,
    )


def test_importing_a_run_whose_id_is_a_path_writes_nothing_anywhere(
    stack: Stack, store: Any, tmp_path: Path
) -> None:
    target = tmp_path / "escaped"
    for evil in (str(target / "x"), "../../escaped", "run-a/../../x"):
        details = refused(
            lambda evil=evil: store.ImportRun(lineage_pb2.ImportRunRequest(archive=archive_of(record(evil)))),
            grpc.StatusCode.INVALID_ARGUMENT,
            "invalid_archive",
            "is not a run id",
            stack=stack,
        )
        assert str(tmp_path) not in details
    assert not target.exists()
    assert all(r.run_id.startswith("run-") for r in stored_runs(stack))


def test_an_archive_with_empty_hardware_is_refused(store: Any) -> None:
    archive = archive_of(record("run-emptyhw", hardware=""))
    refused(
        lambda: store.ImportRun(lineage_pb2.ImportRunRequest(archive=archive)),
        grpc.StatusCode.INVALID_ARGUMENT,
        "hardware",
    )


def test_a_gzip_bomb_is_refused_at_the_decompression_cap(stack: Stack, store: Any) -> None:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb") as bomb:
        chunk = bytes(1024 * 1024)
        for _ in range(4 * MAX_DECOMPRESSED_BYTES // len(chunk)):
            bomb.write(chunk)
    assert len(buffer.getvalue()) < MAX_ARCHIVE_BYTES
    refused(
        lambda: store.ImportRun(lineage_pb2.ImportRunRequest(archive=buffer.getvalue())),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "KF_API_MAX_DECOMPRESSED_BYTES",
        str(MAX_DECOMPRESSED_BYTES),
    )
    assert stack.service("store").alive()


def test_requests_above_the_configured_sizes_are_resource_exhausted(evolver: Any, store: Any) -> None:
    big = submission()
    big.task.instructions = "x" * (MAX_REQUEST_BYTES + 1)
    refused(lambda: evolver.SubmitRun(big, timeout=30), grpc.StatusCode.RESOURCE_EXHAUSTED)
    refused(
        lambda: store.ImportRun(lineage_pb2.ImportRunRequest(archive=b"\x1f" * (MAX_ARCHIVE_BYTES + 1))),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "KF_API_MAX_ARCHIVE_BYTES",
    )


@pytest.mark.parametrize("payload", [b"\xff\xff\xff\xff", b"\x0a\x05ab", bytes(range(256))])
def test_undecodable_payloads_are_invalid_argument_on_both_services(stack: Stack, payload: bytes) -> None:
    for address, method in (
        (stack.grpc_address, EVOLVER + "SubmitRun"),
        (stack.grpc_address, EVOLVER + "GetRun"),
        (stack.store_grpc_address, STORE + "ImportRun"),
        (stack.store_grpc_address, STORE + "ListRuns"),
    ):
        error = raw(address, method, payload)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, (method, error.code(), error.details())
        assert "not a valid" in (error.details() or "")


def test_a_bad_request_is_logged_once_as_a_warning_without_a_stack_trace(stack: Stack, evolver: Any) -> None:
    log_path = stack.state_dir / "logs" / "evolver.log"

    def refusals() -> list[dict[str, Any]]:
        entries = []
        for line in log_path.read_text().splitlines():
            if '"request refused"' in line and '"CancelRun"' in line:
                entries.append(json.loads(line))
        return entries

    before = len(refusals())
    refused(
        lambda: evolver.CancelRun(service_pb2.CancelRunRequest(run_id="../x")),
        grpc.StatusCode.INVALID_ARGUMENT,
    )
    after = refusals()
    assert len(after) == before + 1
    assert after[-1]["level"] == "warning"
    assert "run_id" in after[-1]["detail"]
    assert "Traceback" not in log_path.read_text()


def test_memory_stays_level_under_thousands_of_bad_requests(stack: Stack, evolver: Any, store: Any) -> None:
    bad_archive = archive_of(record("/abs/path"))
    corrupt = b"\x1f\x8b" + bytes(200)

    def burst(count: int) -> None:
        for i in range(count):
            kind = i % 6
            try:
                if kind == 0:
                    evolver.SubmitRun(submission(islands=INT32_MAX - i), timeout=30)
                elif kind == 1:
                    evolver.SubmitRun(submission(generator=f"nope{i}"), timeout=30)
                elif kind == 2:
                    evolver.GetRun(service_pb2.GetRunRequest(run_id=f"/x/{i}"), timeout=30)
                elif kind == 3:
                    store.ImportRun(lineage_pb2.ImportRunRequest(archive=bad_archive), timeout=30)
                elif kind == 4:
                    store.ImportRun(
                        lineage_pb2.ImportRunRequest(archive=corrupt + bytes([i % 256])), timeout=30
                    )
                else:
                    store.GetLineageTree(
                        lineage_pb2.GetLineageTreeRequest(candidate_id=f"../{i}"), timeout=30
                    )
            except grpc.RpcError as exc:
                assert exc.code() not in (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL), exc.details()
            else:
                raise AssertionError(f"bad request {i} was accepted")

    burst(300)
    after_warmup = {s: rss_kib(stack, s) for s in ("evolver", "store", "llm")}
    burst(3000)
    after = {s: rss_kib(stack, s) for s in ("evolver", "store", "llm")}
    print("RSS KiB after 300 / 3,300 bad requests:", after_warmup, after)
    for service, level in after_warmup.items():
        assert after[service] <= level * 1.10 + 16 * 1024, (service, level, after[service])


def test_restart_after_importing_unfinished_runs_starts_every_service_and_fails_the_poisoned_one(
    stack: Stack, store: Any, evolver: Any
) -> None:
    imported = store.ImportRun(
        lineage_pb2.ImportRunRequest(archive=archive_of(record("run-unknownhw", hardware="quantum.qpu")))
    )
    assert imported.run_id == "run-unknownhw"
    stored = store.GetRunRecord(lineage_pb2.GetRunRecordRequest(run_id="run-unknownhw")).run
    assert stored.status == "stopped"
    # What an older version could leave behind: a running run whose hardware is empty.
    asyncio.run(_poison(stack, record("run-poisoned", hardware="")))

    evolver_process = stack.service("evolver")
    evolver_process.stop()
    evolver_process.start()
    deadline = time.monotonic() + 180
    while True:
        try:
            evolver.GetRun(service_pb2.GetRunRequest(run_id="run-0123456789ab"), timeout=5)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                break
            assert time.monotonic() < deadline, f"the evolver did not come back: {exc.code()}"
            time.sleep(0.5)
    assert all(service.alive() for service in stack.services.values())
    deadline = time.monotonic() + 60
    while True:
        poisoned = store.GetRunRecord(lineage_pb2.GetRunRecordRequest(run_id="run-poisoned")).run
        if poisoned.status == "failed":
            break
        assert time.monotonic() < deadline, poisoned.status
        time.sleep(0.5)
    assert "unknown_hardware" in poisoned.summary_json
    assert store.GetRunRecord(lineage_pb2.GetRunRecordRequest(run_id="run-unknownhw")).run.status == "stopped"


async def _poison(stack: Stack, run: RunRecord) -> None:
    repo = await open_repository(f"sqlite:///{stack.state_dir / 'lineage.db'}")
    try:
        await repo.save_run(run)
    finally:
        await repo.close()


def unfinished_with_task(run_id: str, **config_fields: Any) -> RunRecord:
    """An unfinished run of another deployment as its archive carries it: the task in its configuration."""
    task = chain_task()
    run = record(run_id)
    config = {**run.config, **config_fields}
    config["task"] = MessageToDict(task_to_proto(task), preserving_proto_field_name=True)
    return dataclasses.replace(
        run,
        task_name=task.name,
        task_source=task.reference_source,
        config=config,
        hardware=str(config["hardware"]),
    )


def stored_status(store: Any, run_id: str) -> str:
    return store.GetRunRecord(lineage_pb2.GetRunRecordRequest(run_id=run_id)).run.status


def test_resume_refuses_runs_it_cannot_continue_and_changes_nothing(
    stack: Stack, store: Any, evolver: Any
) -> None:
    refused(
        lambda: evolver.ResumeRun(service_pb2.ResumeRunRequest(run_id="run-0123456789ab"), timeout=30),
        grpc.StatusCode.NOT_FOUND,
        "run_not_found",
    )
    cases = [
        (unfinished_with_task("run-rescuda", hardware="cuda.h200"), "unserved_hardware", "cuda.h200"),
        (unfinished_with_task("run-resqpu", hardware="quantum.qpu"), "unknown_hardware", "quantum.qpu"),
        (unfinished_with_task("run-resgen", generator="nope"), "unserved_generator", "nope"),
        (unfinished_with_task("run-respop", population=65), "limit_exceeded", "KF_API_MAX_POPULATION"),
        (record("run-resnotask"), "invalid_task", "empty_task"),
    ]
    for run, *_ in cases:
        store.ImportRun(lineage_pb2.ImportRunRequest(archive=archive_of(run)), timeout=30)
    before = (run_folders(stack), len(stored_runs(stack)))
    for run, reason, needle in cases:
        refused(
            lambda run=run: evolver.ResumeRun(service_pb2.ResumeRunRequest(run_id=run.run_id), timeout=60),
            grpc.StatusCode.FAILED_PRECONDITION,
            reason,
            needle,
            stack=stack,
        )
        assert stored_status(store, run.run_id) == "stopped"
        stopped = evolver.GetRun(service_pb2.GetRunRequest(run_id=run.run_id), timeout=30).progress
        assert stopped.status == run_pb2.RUN_STATUS_STOPPED and "resume" in stopped.message
    assert (run_folders(stack), len(stored_runs(stack))) == before
    assert stack.service("evolver").alive()


def test_an_imported_unfinished_run_is_resumed_on_request_and_completes_correctly(
    stack: Stack, store: Any, evolver: Any
) -> None:
    from kernelfoundry.client import KernelFoundryClient

    run = unfinished_with_task("run-resumeme")
    imported = store.ImportRun(lineage_pb2.ImportRunRequest(archive=archive_of(run)), timeout=30)
    assert imported.run_id == run.run_id and stored_status(store, run.run_id) == "stopped"
    resumed = evolver.ResumeRun(service_pb2.ResumeRunRequest(run_id=run.run_id), timeout=300).progress
    assert resumed.status == run_pb2.RUN_STATUS_RUNNING
    client = KernelFoundryClient(stack.grpc_address)
    try:
        final = wait_finished(client, run.run_id)
    finally:
        client.close()
    assert final.status == run_pb2.RUN_STATUS_COMPLETED, final.message
    assert final.candidates_correct >= 1
    _candidates, _evaluations, _builds, stored, _ = wait_lineage_complete(stack, run.run_id)
    assert stored.status == "finished"
    refused(
        lambda: evolver.ResumeRun(service_pb2.ResumeRunRequest(run_id=run.run_id), timeout=30),
        grpc.StatusCode.FAILED_PRECONDITION,
        "run_not_stopped",
        "finished",
    )
    best = evolver.GetBestKernel(service_pb2.GetBestKernelRequest(run_id=run.run_id), timeout=30).best
    assert best.candidate_id and best.source.code


def test_a_normal_small_run_afterwards_completes_correctly(stack: Stack) -> None:
    from kernelfoundry.client import KernelFoundryClient

    client = KernelFoundryClient(stack.grpc_address)
    try:
        run_id = client.submit(chain_task(), config(iterations=1, population=2))
        final = wait_finished(client, run_id)
        assert final.status == run_pb2.RUN_STATUS_COMPLETED, final.message
        assert final.candidates_correct >= 1
        _candidates, _evaluations, _builds, run, _ = wait_lineage_complete(stack, run_id)
        assert run.status == "finished"
    finally:
        client.close()


def test_no_export_of_any_run_touches_a_path_outside_the_store(stack: Stack, store: Any) -> None:
    before = {p.name for p in Path("/tmp").iterdir() if p.name.startswith("kf-export")}
    for run in stored_runs(stack):
        response = store.ExportRun(lineage_pb2.ExportRunRequest(run_id=run.run_id))
        assert response.file_name == f"{run.run_id}.kfrun.tar.gz"
        with tarfile.open(fileobj=io.BytesIO(response.archive), mode="r:gz") as tar:
            assert all(".." not in name and not name.startswith("/") for name in tar.getnames())
    assert {p.name for p in Path("/tmp").iterdir() if p.name.startswith("kf-export")} == before
