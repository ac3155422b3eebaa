"""Executor service entry point: one device, one evaluation at a time, from its hardware subject.

Executors of one hardware share its durable consumer (`executor-<hardware>`): each fetches one candidate
at a time, so the queue spreads candidates over them and hands each to one executor.
"""

from __future__ import annotations

import os
import socket
from dataclasses import replace
from pathlib import Path

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import decoder_for
from kernelfoundry.bus.jetstream import Bus
from kernelfoundry.config import Settings
from kernelfoundry.evaluation import EvaluationSettings, EvaluationWorker
from kernelfoundry.service_host import ServiceParts, make_consumer, run_service
from kernelfoundry.services.executor.handlers import EvaluateHandler
from kernelfoundry.services.executor.identity import executor_identity
from kernelfoundry.stack.device_lease import DeviceLease
from kernelfoundry.telemetry.logging import get_logger
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import build_pb2

SERVICE = "executor"
log = get_logger(__name__)


def device_for(hardware: str) -> str:
    """`cpu.x86_64` -> `cpu`; `cuda.h200` -> `cuda:0` (CUDA_VISIBLE_DEVICES picks the device)."""
    backend = hardware.split(".", 1)[0]
    return "cpu" if backend == "cpu" else "cuda:0"


def evaluation_settings(settings: Settings, device: str) -> EvaluationSettings:
    base = EvaluationSettings()
    changes: dict[str, object] = {"deadline_s": settings.evaluation_deadline_s}
    if settings.correctness_trials:
        changes["correctness_trials"] = settings.correctness_trials
    if settings.timed_runs:
        changes["timed_runs"] = settings.timed_runs
    if settings.cpu_threads:
        changes["cpu_threads"] = settings.cpu_threads
    if settings.timing_lock_dir and device == "cpu":  # builds share the CPU's cores, not a GPU's
        changes["timing_lock_dir"] = settings.timing_lock_dir
    if settings.torch_compile_baseline is not None:
        changes["measure_torch_compile"] = settings.torch_compile_baseline
    return replace(base, **changes)  # type: ignore[arg-type]


def judge_writable(settings: Settings, device: str) -> tuple[Path, ...]:
    """What the sandboxed judge may write besides its scratch: the host's timing lock (CPU only)."""
    if not (settings.timing_lock_dir and device == "cpu"):
        return ()
    folder = Path(settings.timing_lock_dir)
    folder.mkdir(parents=True, exist_ok=True)
    return (folder,)


async def wire(settings: Settings, bus: Bus, metrics: Metrics) -> ServiceParts:
    hardware = settings.hardware_list[0]
    device = device_for(hardware)
    lease = DeviceLease(settings.device_lock_dir)
    worker = EvaluationWorker(device, writable=judge_writable(settings, device), lease=lease)
    identity = executor_identity(
        settings.executor_name, device, socket.gethostname(), os.environ.get("CUDA_VISIBLE_DEVICES")
    )
    log.info("executor ready", hardware=hardware, executor=identity.name, device=identity.device)
    evaluation = evaluation_settings(settings, device)
    handler = EvaluateHandler(bus, worker, evaluation, metrics, identity, max_deliver=settings.max_deliver)
    consumer = make_consumer(
        settings,
        bus,
        metrics,
        SERVICE,
        stream=subjects.WORK_STREAM,
        durable=f"executor-{hardware.replace('.', '-')}",
        filter_subjects=(subjects.execute(hardware),),
        decode=decoder_for(build_pb2.EvaluateCandidate),
        handler=handler,
        batch=1,  # one evaluation at a time per device: fetch again only after acking
    )

    async def close() -> None:
        worker.close()

    return ServiceParts(consumers=[consumer], closers=[close])


def main(settings: Settings) -> None:
    run_service(SERVICE, settings, wire)
