"""Executor handler: EvaluateCandidate -> artifact from the object store -> evaluation -> event.

Owns one device through its EvaluationWorkers (child processes, recycled after device errors), one per
evaluation slot: each evaluation takes a free one (one slot: one evaluation at a time). A failed
evaluation is a result (EvaluationFinished with its reason), never an exception. Repeated deliveries of a
candidate it already evaluated are answered from memory, so no candidate is evaluated twice by a worker.
The record names the executor and the device that evaluated it (details `executor`), and the device's
busy seconds are counted (kf_executor_busy_seconds_total). An evaluation the judge could not make because
the device's memory was held by other processes (a validation or another executor on the same GPU: the
judge's own allocation failed, or the runner's placing a shape's buffers before the candidate's code ran,
not the candidate's) is no verdict on the candidate: the request comes back later, after delays that
double from MEMORY_RETRY_DELAY_S (15, 30, 60, 120 s: a validation of a task with inputs of several GB
holds tens of GB for a minute or more), and only at its MEMORY_RETRIES-th delivery (never past the
consumer's own limit of deliveries) is such a failure published as the verdict.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import Delivery, Reject, Retry
from kernelfoundry.bus.protocol import Bus, Outgoing
from kernelfoundry.codec import kernel_from_proto, task_from_proto
from kernelfoundry.evaluation import (
    EvaluationReport,
    EvaluationRequest,
    EvaluationSettings,
    EvaluationWorker,
    reasons,
)
from kernelfoundry.services.executor.identity import ExecutorIdentity
from kernelfoundry.tasks.model import TaskError
from kernelfoundry.telemetry.logging import get_logger
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import build_pb2, evaluation_pb2

RECENT_RESULTS = 256
MEMORY_RETRIES = 5  # deliveries of a request whose judge ran out of device memory before it is failed
MEMORY_RETRY_DELAY_S = 15.0  # the first delay; each later one doubles
log = get_logger(__name__)


def judge_out_of_memory(report: EvaluationReport) -> bool:
    """The judge, or the runner placing buffers before the candidate's code ran, ran out of memory, as
    opposed to the candidate's code (whose failures carry the candidate's reasons)."""
    return report.reason in reasons.MEMORY_REASONS


def report_to_event(
    request: build_pb2.EvaluateCandidate, report: EvaluationReport, identity: ExecutorIdentity | None = None
) -> evaluation_pb2.EvaluationFinished:
    details = report.to_dict()
    if identity is not None:
        details["executor"] = identity.as_dict()  # which executor and device evaluated it
    shapes = [
        evaluation_pb2.ShapeTiming(
            shape=s.shape,
            runtime_ms=s.runtime_ms or 0.0,
            baseline_ms=s.baseline_ms or 0.0,
            compile_baseline_ms=s.compile_baseline_ms or 0.0,
        )
        for s in report.per_shape
    ]
    return evaluation_pb2.EvaluationFinished(
        candidate_id=request.candidate_id,
        run_id=request.run_id,
        hardware=request.hardware,
        correct=bool(report.correct),
        reason=report.reason or "",
        message=(report.message or "")[:4000],
        max_abs_error=float(report.max_abs_error or 0.0),
        max_rel_error=float(report.max_rel_error or 0.0),
        precision=report.precision or "",
        runtime_ms=float(report.runtime_ms or 0.0),
        runtime_spread_ms=float(report.runtime_spread_ms or 0.0),
        baseline_ms=float(report.baseline_ms or 0.0),
        compile_baseline_ms=float(report.compile_baseline_ms or 0.0),
        speedup=float(report.speedup or 0.0) if report.correct else 0.0,
        speedup_vs_compile=float(report.speedup_vs_compile or 0.0) if report.correct else 0.0,
        shapes=shapes,
        device_name=report.device_name or report.device,
        duration_s=report.duration_s,
        details_json=json.dumps(details, default=str),
        screened=bool(report.screened),
        floor_ms=float(report.floor_ms or 0.0),
        roofline_fraction=float(report.roofline_fraction or 0.0) if report.correct else 0.0,
        bound=report.bound if report.correct else "",
    )


class EvaluateHandler:
    def __init__(
        self,
        bus: Bus,
        workers: Sequence[EvaluationWorker],
        settings: EvaluationSettings,
        metrics: Metrics | None = None,
        identity: ExecutorIdentity | None = None,
        max_deliver: int = MEMORY_RETRIES,
    ):
        """`max_deliver`: the consumer's deliveries before it dead-letters a request; a request out of
        device memory is published as failed at the last of them if that comes before MEMORY_RETRIES."""
        if not workers:
            raise ValueError("an executor needs at least one evaluation worker")
        self.bus = bus
        self.workers = list(workers)
        self.device = self.workers[0].device
        self.settings = settings
        self.metrics = metrics
        self.identity = identity or ExecutorIdentity(name="", device=self.device, host="")
        self.memory_retries = max(1, min(MEMORY_RETRIES, max_deliver))
        self._recent: OrderedDict[str, evaluation_pb2.EvaluationFinished] = OrderedDict()
        self._free: asyncio.Queue[EvaluationWorker] | None = None  # made on first use, in the loop
        # candidates being judged now -> their verdict (None: the evaluation ended without one)
        self._inflight: dict[str, asyncio.Future[evaluation_pb2.EvaluationFinished | None]] = {}

    def _free_workers(self) -> asyncio.Queue[EvaluationWorker]:
        if self._free is None:
            self._free = asyncio.Queue()
            for worker in self.workers:
                self._free.put_nowait(worker)
        return self._free

    async def __call__(self, request: build_pb2.EvaluateCandidate, delivery: Delivery) -> Sequence[Outgoing]:
        candidate_id = request.candidate_id
        msg_id = f"evaluated-{candidate_id}"
        cached = self._recent.get(candidate_id)
        if cached is not None:
            return [Outgoing(subjects.evaluation_finished(request.hardware), cached, msg_id)]
        pending = self._inflight.get(candidate_id)
        if pending is not None:  # delivered again while another slot judges it: that verdict, once
            event = await asyncio.shield(pending)
            if event is None:
                raise Retry(f"candidate {candidate_id}: its evaluation in flight ended without a verdict")
            return [Outgoing(subjects.evaluation_finished(request.hardware), event, msg_id)]
        verdict = asyncio.get_running_loop().create_future()
        self._inflight[candidate_id] = verdict
        try:
            return await self._evaluate(request, delivery)
        finally:
            del self._inflight[candidate_id]
            verdict.set_result(self._recent.get(candidate_id))

    async def _evaluate(self, request: build_pb2.EvaluateCandidate, delivery: Delivery) -> Sequence[Outgoing]:
        msg_id = f"evaluated-{request.candidate_id}"
        try:
            task = task_from_proto(request.task)
            kernel = kernel_from_proto(request.source)
        except (TaskError, ValueError) as exc:
            raise Reject("bad_request", f"candidate {request.candidate_id}: {exc}") from exc
        try:
            data = await self.bus.get_artifact(request.artifact)
        except Exception as exc:
            raise Retry(f"artifact {request.artifact} not readable yet: {exc}", delay_s=2.0) from exc
        free = self._free_workers()
        worker = await free.get()  # a free slot; its judge runs one evaluation at a time
        try:
            log.info(
                "evaluation started",
                candidate_id=request.candidate_id,
                run_id=request.run_id,
                executor=self.identity.name,
                device=self.identity.device,
            )
            started = time.monotonic()
            with tempfile.TemporaryDirectory(prefix="kf-eval-") as tmp:
                artifact = Path(tmp) / "unit.so"
                artifact.write_bytes(data)
                evaluation = EvaluationRequest(
                    task=task,
                    kernel=kernel,
                    artifact=artifact,
                    device=self.device,
                    settings=replace(self.settings, screen_above_ms=max(0.0, request.screen_above_ms)),
                )
                report = await asyncio.to_thread(worker.evaluate, evaluation)
            busy_s = time.monotonic() - started
        finally:
            free.put_nowait(worker)
        log.info(
            "evaluation finished",
            candidate_id=request.candidate_id,
            run_id=request.run_id,
            correct=report.correct,
            reason=report.reason,
            busy_s=round(busy_s, 3),
            runtime_ms=report.runtime_ms,
            phases_ms=report.phases_ms,
            counters=report.counters,
            # what the checks judged by: why a checked call was or was not decided on the proxy
            max_abs_error=report.max_abs_error,
            tolerance=[report.tolerance_atol, report.tolerance_rtol],
        )
        if judge_out_of_memory(report) and delivery.deliveries < self.memory_retries:
            log.warning(
                "evaluation deferred: the device's memory was held elsewhere",
                candidate_id=request.candidate_id,
                deliveries=delivery.deliveries,
                message=report.message[:300],
            )
            raise Retry(
                f"candidate {request.candidate_id}: the evaluation ran out of device memory: "
                f"{report.message[:200]}",
                delay_s=MEMORY_RETRY_DELAY_S * 2 ** (delivery.deliveries - 1),
            )
        event = report_to_event(request, report, self.identity)
        self._remember(request.candidate_id, event)
        if self.metrics is not None:
            self.metrics.executor_busy_seconds_total.labels(
                hardware=request.hardware, device=self.identity.device
            ).inc(busy_s)
            outcome = "correct" if report.correct else "failed"
            self.metrics.evaluations_total.labels(hardware=request.hardware, outcome=outcome).inc()
            if not report.correct:
                self.metrics.evaluation_failures_total.labels(
                    hardware=request.hardware, reason=report.reason or "unknown"
                ).inc()
        return [Outgoing(subjects.evaluation_finished(request.hardware), event, msg_id)]

    def _remember(self, candidate_id: str, event: evaluation_pb2.EvaluationFinished) -> None:
        self._recent[candidate_id] = event
        while len(self._recent) > RECENT_RESULTS:
            self._recent.popitem(last=False)
