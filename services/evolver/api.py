"""The public gRPC API (KernelFoundryService), served by the evolver.

Validation happens before anything is created: the edge (kernelfoundry.api: the request contract, the
configured limits, served hardware and generators, `admissions` below) runs before any handler; then a task
that does not import, lacks Model/get_inputs, whose reference raises, or whose output cannot tell a kernel
from a cheat, is answered with INVALID_ARGUMENT naming the problem, and no run, event or message exists
for it. Run ids are made here (kernelfoundry.api.ids).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc

from kernelfoundry.api.admission import SubmitRunAdmission, with_defaults
from kernelfoundry.api.ids import new_run_id
from kernelfoundry.api.limits import ApiLimits
from kernelfoundry.api.serving import ServingProbe
from kernelfoundry.bus.jetstream import Bus
from kernelfoundry.codec import task_from_proto, task_to_proto
from kernelfoundry.config import Settings
from kernelfoundry.services.evolver.runs import RunCoordinator, RunState
from kernelfoundry.tasks.analysis import reference_op_count
from kernelfoundry.tasks.loading import load_task_from_source
from kernelfoundry.tasks.model import Task, TaskError
from kernelfoundry.tasks.validation import device_for_hardware, validate_task
from kernelfoundry.telemetry.logging import get_logger
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import run_pb2, service_pb2, service_pb2_grpc

log = get_logger(__name__)


class KernelFoundryApi(service_pb2_grpc.KernelFoundryServiceServicer):
    def __init__(
        self, settings: Settings, bus: Bus, runs: RunCoordinator, metrics: Metrics | None = None
    ) -> None:
        self.settings = settings
        self.bus = bus
        self.runs = runs
        self.metrics = metrics

    async def _validated(self, request: service_pb2.SubmitRunRequest) -> Task:
        proto = request.task
        if not proto.reference_source.strip():
            raise TaskError("empty_task", "the submitted task has no reference source")
        parsed = load_task_from_source(proto.reference_source, proto.name or "task")  # static checks
        task = task_from_proto(proto)
        if not proto.name:
            task = parsed
        # On the run's own device (its GPU when this machine has it), cached by task, shapes and device.
        device = device_for_hardware(request.config.hardware or "cpu.x86_64")
        cache = self.settings.state_dir / "validation-cache"
        await asyncio.to_thread(validate_task, task, device=device, cache_dir=cache)
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
            run_id, task, task_to_proto(task), config, build_target, reference_op_count(task.reference_source)
        )
        await self.bus.publish_all(out)
        if self.metrics is not None:
            self.metrics.runs_active.inc()
        log.info("run submitted", run_id=run_id, task=task.name, hardware=config.hardware)
        return service_pb2.SubmitRunResponse(run_id=run_id)

    def _run(self, run_id: str) -> RunState | None:
        return self.runs.runs.get(run_id)

    async def StreamRunProgress(
        self, request, context
    ) -> AsyncIterator[service_pb2.StreamRunProgressResponse]:  # type: ignore[no-untyped-def,override]
        run = self._run(request.run_id)
        if run is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no run {request.run_id!r}")
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
        run = self._run(request.run_id)
        if run is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no run {request.run_id!r}")
        return service_pb2.GetRunResponse(progress=self.runs.progress(run))  # type: ignore[arg-type]

    async def GetBestKernel(self, request, context):  # type: ignore[no-untyped-def]
        run = self._run(request.run_id)
        if run is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no run {request.run_id!r}")
        return service_pb2.GetBestKernelResponse(best=self.runs.best_kernel(run))  # type: ignore[arg-type]

    async def CancelRun(self, request, context):  # type: ignore[no-untyped-def]
        run = self._run(request.run_id)
        if run is None:
            await context.abort(grpc.StatusCode.NOT_FOUND, f"no run {request.run_id!r}")
        await self.bus.publish_all(self.runs.cancel(request.run_id))
        return service_pb2.CancelRunResponse(progress=self.runs.progress(run))  # type: ignore[arg-type]


def admissions(
    settings: Settings, runs: RunCoordinator, probe: ServingProbe
) -> dict[str, SubmitRunAdmission]:
    """The evolver API's checks that need server state, by method, for the edge interceptor."""
    submit = SubmitRunAdmission(
        ApiLimits.from_settings(settings),
        probe,
        settings.generator,
        active_runs=lambda: sum(1 for run in runs.runs.values() if run.active),
        build_target_for=runs.build_target_for,
    )
    return {"SubmitRun": submit}
