"""Executor service entry point: one device, one evaluation at a time, from its hardware subject."""

from __future__ import annotations

from dataclasses import replace

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import decoder_for
from kernelfoundry.bus.jetstream import Bus
from kernelfoundry.config import Settings
from kernelfoundry.evaluation import EvaluationSettings, EvaluationWorker
from kernelfoundry.service_host import ServiceParts, make_consumer, run_service
from kernelfoundry.services.executor.handlers import EvaluateHandler
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import build_pb2

SERVICE = "executor"


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


async def wire(settings: Settings, bus: Bus, metrics: Metrics) -> ServiceParts:
    hardware = settings.hardware_list[0]
    device = device_for(hardware)
    worker = EvaluationWorker(device)
    handler = EvaluateHandler(bus, worker, evaluation_settings(settings, device), metrics)
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
