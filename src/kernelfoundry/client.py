"""A small client of the public gRPC API, used by the CLI and the end-to-end tests.

Both clients reach their server as `security` says (kernelfoundry.api.auth.ClientSecurity: TLS with a CA,
a bearer token on every call); without one, as this process's settings say (KF_API_TOKEN, KF_API_TLS_CA,
KF_API_TLS, KF_API_TLS_SERVER_NAME), which is plaintext without a token when none is set.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import grpc

from kernelfoundry.api.auth import ClientSecurity
from kernelfoundry.codec import task_to_proto
from kernelfoundry.config import load_settings
from kernelfoundry.tasks.model import Task
from kernelfoundry.v1 import lineage_pb2, lineage_pb2_grpc, run_pb2, service_pb2, service_pb2_grpc

REFUSALS = (
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
)


class SubmissionRejected(ValueError):
    """The server refused the submission (INVALID_ARGUMENT, FAILED_PRECONDITION: hardware or a generator
    nothing serves, RESOURCE_EXHAUSTED: beyond a limit); the message names the problem."""


class ResumeRefused(ValueError):
    """The server will not resume the run: NOT_FOUND (no such run), FAILED_PRECONDITION (not stopped, or
    its hardware, generator or task cannot be served there) or RESOURCE_EXHAUSTED (too many runs); the
    message is `reason: message`. `code` is the gRPC status."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code


def security_from_settings() -> ClientSecurity:
    """The client security this process's settings configure."""
    return ClientSecurity.from_settings(load_settings())


class KernelFoundryClient:
    def __init__(self, address: str, security: ClientSecurity | None = None) -> None:
        self.address = address
        self.security = security if security is not None else security_from_settings()
        self.channel = self.security.channel(address)
        self.stub = service_pb2_grpc.KernelFoundryServiceStub(self.channel)

    def ready(self, timeout_s: float = 1.0) -> bool:
        try:
            grpc.channel_ready_future(self.channel).result(timeout=timeout_s)
        except grpc.FutureTimeoutError:
            return False
        return True

    def submit(self, task: Task, config: run_pb2.RunConfig, timeout_s: float = 300.0) -> str:
        request = service_pb2.SubmitRunRequest(task=task_to_proto(task), config=config)
        try:
            return self.stub.SubmitRun(request, timeout=timeout_s).run_id
        except grpc.RpcError as exc:
            if exc.code() in REFUSALS:
                raise SubmissionRejected(exc.details()) from exc
            raise

    def progress(self, run_id: str) -> Iterator[run_pb2.RunProgress]:
        for response in self.stub.StreamRunProgress(service_pb2.StreamRunProgressRequest(run_id=run_id)):
            yield response.progress

    def get_run(self, run_id: str) -> run_pb2.RunProgress:
        return self.stub.GetRun(service_pb2.GetRunRequest(run_id=run_id)).progress

    def best_kernel(self, run_id: str) -> run_pb2.BestKernel:
        return self.stub.GetBestKernel(service_pb2.GetBestKernelRequest(run_id=run_id)).best

    def cancel(self, run_id: str) -> run_pb2.RunProgress:
        return self.stub.CancelRun(service_pb2.CancelRunRequest(run_id=run_id)).progress

    def resume(self, run_id: str, timeout_s: float = 300.0) -> run_pb2.RunProgress:
        """Continue a stopped run (one imported unfinished); its progress once it runs again."""
        try:
            return self.stub.ResumeRun(
                service_pb2.ResumeRunRequest(run_id=run_id), timeout=timeout_s
            ).progress
        except grpc.RpcError as exc:
            if exc.code() in (*REFUSALS, grpc.StatusCode.NOT_FOUND):
                raise ResumeRefused(exc.code(), exc.details() or "") from exc
            raise

    def close(self) -> None:
        self.channel.close()


class LineageClient:
    """Async client of the store's lineage API (used by the evolver to resume runs, and by the CLI)."""

    def __init__(self, address: str, security: ClientSecurity | None = None) -> None:
        self.address = address
        self.security = security if security is not None else security_from_settings()
        self.channel = self.security.aio_channel(
            address,
            options=[
                ("grpc.max_receive_message_length", 256 * 1024 * 1024),
                ("grpc.max_send_message_length", 256 * 1024 * 1024),
            ],
        )
        self.stub = lineage_pb2_grpc.LineageServiceStub(self.channel)

    async def ready(self, timeout_s: float) -> bool:
        try:
            await asyncio.wait_for(self.channel.channel_ready(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def list_runs(
        self, status: str = "", task_name: str = "", limit: int = 0
    ) -> list[lineage_pb2.RunRecord]:
        request = lineage_pb2.ListRunsRequest(status=status, task_name=task_name, limit=limit)
        return list((await self.stub.ListRuns(request)).runs)

    async def run_history(self, run_id: str) -> lineage_pb2.GetRunHistoryResponse:
        return await self.stub.GetRunHistory(lineage_pb2.GetRunHistoryRequest(run_id=run_id))

    async def get_run(self, run_id: str, timeout_s: float | None = None) -> lineage_pb2.RunRecord:
        request = lineage_pb2.GetRunRecordRequest(run_id=run_id)
        return (await self.stub.GetRunRecord(request, timeout=timeout_s)).run

    async def lineage_tree(
        self, candidate_id: str, max_depth: int = 0, timeout_s: float | None = None
    ) -> lineage_pb2.GetLineageTreeResponse:
        request = lineage_pb2.GetLineageTreeRequest(candidate_id=candidate_id, max_depth=max_depth)
        return await self.stub.GetLineageTree(request, timeout=timeout_s)

    async def best_kernels(
        self, task_name: str = "", hardware: str = "", timeout_s: float | None = None
    ) -> list[lineage_pb2.BestKernelRecord]:
        request = lineage_pb2.GetBestKernelsRequest(task_name=task_name, hardware=hardware)
        return list((await self.stub.GetBestKernels(request, timeout=timeout_s)).kernels)

    async def archive_snapshots(
        self, run_id: str, timeout_s: float | None = None
    ) -> list[lineage_pb2.ArchiveSnapshotRecord]:
        request = lineage_pb2.GetArchiveSnapshotsRequest(run_id=run_id)
        return list((await self.stub.GetArchiveSnapshots(request, timeout=timeout_s)).snapshots)

    async def failure_summary(
        self, run_id: str = "", timeout_s: float | None = None
    ) -> list[lineage_pb2.FailureCount]:
        request = lineage_pb2.GetFailureSummaryRequest(run_id=run_id)
        return list((await self.stub.GetFailureSummary(request, timeout=timeout_s)).failures)

    async def usage_totals(
        self, run_id: str = "", group_by: str = "generator", timeout_s: float | None = None
    ) -> list[lineage_pb2.UsageTotal]:
        request = lineage_pb2.GetUsageTotalsRequest(run_id=run_id, group_by=group_by)
        return list((await self.stub.GetUsageTotals(request, timeout=timeout_s)).totals)

    async def export_run(self, run_id: str, timeout_s: float | None = None) -> lineage_pb2.ExportRunResponse:
        return await self.stub.ExportRun(lineage_pb2.ExportRunRequest(run_id=run_id), timeout=timeout_s)

    async def import_run(
        self, archive: bytes, timeout_s: float | None = None
    ) -> lineage_pb2.ImportRunResponse:
        return await self.stub.ImportRun(lineage_pb2.ImportRunRequest(archive=archive), timeout=timeout_s)

    async def close(self) -> None:
        await self.channel.close()
