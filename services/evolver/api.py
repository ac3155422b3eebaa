"""The public gRPC API (KernelFoundryService), served by the evolver.

Validation happens before anything is created: the edge (kernelfoundry.api: the request contract, the
configured limits, served hardware and generators, `admissions` below) runs before any handler; then a task
that does not import, lacks Model/get_inputs, whose reference raises, or whose output cannot tell a kernel
from a cheat, is answered with INVALID_ARGUMENT naming the problem, and no run, event or message exists
for it. The reference runs in the validation pool (kernelfoundry.services.evolver.validation_pool), so a
slow one delays no other run and no other RPC. Run ids are made here (kernelfoundry.ids).

Runs in progress are answered from the coordinator; ended runs from their final progress while it is
kept, then from the store (kernelfoundry.services.evolver.stored), like runs of earlier evolver processes
and stopped runs. ResumeRun continues a stopped run (kernelfoundry.services.evolver.resume).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from functools import partial

import grpc

from kernelfoundry.api.admission import SubmitRunAdmission, with_defaults
from kernelfoundry.api.errors import ApiError, not_found
from kernelfoundry.api.limits import ApiLimits
from kernelfoundry.api.serving import ServingProbe
from kernelfoundry.bus.protocol import Bus
from kernelfoundry.client import LineageClient
from kernelfoundry.codec import task_from_proto
from kernelfoundry.config import Settings
from kernelfoundry.ids import new_run_id
from kernelfoundry.services.evolver.resume import resume_stopped_run
from kernelfoundry.services.evolver.runs import RunCoordinator
from kernelfoundry.services.evolver.state import RunState
from kernelfoundry.services.evolver.stored import best_of_history, progress_of_record
from kernelfoundry.services.evolver.validation_pool import ValidationPool
from kernelfoundry.tasks.analysis import reference_op_count
from kernelfoundry.tasks.loading import load_task_from_source
from kernelfoundry.tasks.model import Task, TaskError
from kernelfoundry.tasks.summary import TaskSummary
from kernelfoundry.tasks.validation import device_for_hardware, validate_task
from kernelfoundry.telemetry.logging import get_logger
from kernelfoundry.v1 import run_pb2, service_pb2, service_pb2_grpc

log = get_logger(__name__)

STORE_TIMEOUT_S = 30.0
Validate = Callable[..., TaskSummary]  # validate_task(task, device=..., cache_dir=...)


def _store_unavailable() -> ApiError:
    return ApiError(
        grpc.StatusCode.UNAVAILABLE, "store_unavailable", "the lineage store did not answer; retry"
    )


class KernelFoundryApi(service_pb2_grpc.KernelFoundryServiceServicer):
    def __init__(
        self,
        settings: Settings,
        bus: Bus,
        runs: RunCoordinator,
        probe: ServingProbe,
        lineage: LineageClient | None = None,
        validate: Validate = validate_task,
    ) -> None:
        self.settings = settings
        self.bus = bus
        self.runs = runs
        self.probe = probe
        self.limits = ApiLimits.from_settings(settings)
        self._lineage = lineage
        self._validate = validate
        self.validations = ValidationPool(settings.validation_workers, settings.validation_queue)

    @property
    def lineage(self) -> LineageClient:
        """The store's lineage API (made on first use, inside the server's event loop)."""
        if self._lineage is None:
            self._lineage = LineageClient(self.settings.store_grpc_address)
        return self._lineage

    async def close(self) -> None:
        self.validations.close()
        if self._lineage is not None:
            await self._lineage.close()

    async def _check_task(self, task: Task, hardware: str) -> None:
        """Run the reference on the run's device (its GPU when this machine has it), cached by task, shapes
        and device in a bounded folder (kernelfoundry.tasks.cache_bounds); raises TaskError. Runs in the
        validation pool, never on the event loop; ApiError(RESOURCE_EXHAUSTED) when its line is full."""
        cache = self.settings.state_dir / "validation-cache"
        device = device_for_hardware(hardware or "cpu.x86_64")
        leases = self.settings.device_lock_dir  # "" turns the GPU leases off
        await self.validations.run(
            partial(self._validate, task, device=device, cache_dir=cache, device_lock_dir=leases)
        )

    async def _validated(self, request: service_pb2.SubmitRunRequest) -> Task:
        proto = request.task
        if not proto.reference_source.strip():
            raise TaskError("empty_task", "the submitted task has no reference source")
        parsed = load_task_from_source(proto.reference_source, proto.name or "task")  # static checks
        task = task_from_proto(proto)
        if not proto.name:
            task = parsed
        await self._check_task(task, request.config.hardware)
        return task

    async def SubmitRun(self, request, context):  # type: ignore[no-untyped-def]
        # The edge (kernelfoundry.api) has checked the contract, the limits and what is served; a task that
        # does not validate raises TaskError, which the edge answers INVALID_ARGUMENT. Nothing exists yet.
        config = with_defaults(request.config, self.settings.generator)
        task = await self._validated(request)
        build_target = self.runs.build_target_for(config.hardware)
        config.iterations = config.iterations or task.budget.iterations
        run_id = new_run_id()
        out = self.runs.start_run(
            run_id, task, config, build_target, reference_op_count(task.reference_source)
        )
        await self.bus.publish_all(out)
        log.info("run submitted", run_id=run_id, task=task.name, hardware=config.hardware)
        return service_pb2.SubmitRunResponse(run_id=run_id)

    async def ResumeRun(self, request, context):  # type: ignore[no-untyped-def]
        # Every check (kernelfoundry.services.evolver.resume.check_resumable) runs before the run is
        # restored; a refusal is an ApiError the edge answers with its status, and nothing has changed.
        out = await resume_stopped_run(
            self.runs, request.run_id, self.lineage, self.probe, self.limits, self._check_task
        )
        await self.bus.publish_all(out)
        return service_pb2.ResumeRunResponse(progress=await self._progress(request.run_id))

    def _run(self, run_id: str) -> RunState | None:
        return self.runs.runs.get(run_id)

    async def _progress(self, run_id: str) -> run_pb2.RunProgress:
        """A run's progress wherever it is: in progress here, ended recently, or only in the store."""
        run = self._run(run_id)
        if run is not None:
            return self.runs.progress(run)
        final = self.runs.final_progress(run_id)
        if final is not None:
            return final
        try:
            record = await self.lineage.get_run(run_id, timeout_s=STORE_TIMEOUT_S)
        except grpc.RpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:  # type: ignore[attr-defined]
                raise not_found("run_not_found", f"no run {run_id!r}") from exc
            raise _store_unavailable() from exc
        return progress_of_record(record)

    async def StreamRunProgress(
        self, request, context
    ) -> AsyncIterator[service_pb2.StreamRunProgressResponse]:  # type: ignore[no-untyped-def,override]
        run = self._run(request.run_id)
        if run is None:  # ended (or never here): its one state, then the stream ends
            yield service_pb2.StreamRunProgressResponse(progress=await self._progress(request.run_id))
            return
        queue: asyncio.Queue[run_pb2.RunProgress] = asyncio.Queue()
        run.listeners.append(queue)
        try:
            yield service_pb2.StreamRunProgressResponse(progress=self.runs.progress(run))
            while run.active:
                progress = await queue.get()
                while not queue.empty():  # coalesce bursts: clients want the latest state
                    progress = queue.get_nowait()
                yield service_pb2.StreamRunProgressResponse(progress=progress)
                if progress.status != run_pb2.RUN_STATUS_RUNNING:
                    return
            yield service_pb2.StreamRunProgressResponse(progress=self.runs.progress(run))
        finally:
            run.listeners.remove(queue)

    async def GetRun(self, request, context):  # type: ignore[no-untyped-def]
        return service_pb2.GetRunResponse(progress=await self._progress(request.run_id))

    async def GetBestKernel(self, request, context):  # type: ignore[no-untyped-def]
        run = self._run(request.run_id)
        if run is not None:
            return service_pb2.GetBestKernelResponse(best=self.runs.best_kernel(run))
        final = self.runs.final_progress(request.run_id)
        if final is not None:
            return service_pb2.GetBestKernelResponse(best=final.best)
        progress = await self._progress(request.run_id)
        if not progress.best.candidate_id:
            return service_pb2.GetBestKernelResponse(best=progress.best)
        try:
            history = await self.lineage.run_history(request.run_id)
        except grpc.RpcError as exc:
            raise _store_unavailable() from exc
        return service_pb2.GetBestKernelResponse(
            best=best_of_history(progress, history, self.settings.state_dir)
        )

    async def CancelRun(self, request, context):  # type: ignore[no-untyped-def]
        # A run that has ended (or runs in no evolver here) is answered with its state, unchanged.
        await self.bus.publish_all(self.runs.cancel(request.run_id))
        return service_pb2.CancelRunResponse(progress=await self._progress(request.run_id))


def admissions(
    settings: Settings, runs: RunCoordinator, probe: ServingProbe
) -> dict[str, SubmitRunAdmission]:
    """The evolver API's checks that need server state, by method, for the edge interceptor."""
    submit = SubmitRunAdmission(
        ApiLimits.from_settings(settings),
        probe,
        settings.generator,
        active_runs=runs.active_count,
        build_target_for=runs.build_target_for,
    )
    return {"SubmitRun": submit}
