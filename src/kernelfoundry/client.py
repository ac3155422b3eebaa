"""A small client of the public gRPC API, used by the CLI and the end-to-end tests."""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from kernelfoundry.codec import task_to_proto
from kernelfoundry.tasks.model import Task
from kernelfoundry.v1 import run_pb2, service_pb2, service_pb2_grpc


class SubmissionRejected(ValueError):
    """The server refused the task (INVALID_ARGUMENT); the message names the problem."""


class KernelFoundryClient:
    def __init__(self, address: str) -> None:
        self.address = address
        self.channel = grpc.insecure_channel(address)
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
            if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
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

    def close(self) -> None:
        self.channel.close()
