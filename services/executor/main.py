"""Executor service entry point: one device, from its hardware subject.

Executors of one hardware share its durable consumer (`executor-<hardware>`): each fetches as many
candidates as it has evaluation slots (`executor_slots`, one by default), so the queue spreads candidates
over them and hands each to one executor. A GPU executor of several slots runs that many judges: their
runner starts, input sets and correctness trials overlap, and their timed runs take turns through a
per-GPU timing lock (kernelfoundry.stack.quiet_host), so no timed run shares the device.
"""

from __future__ import annotations

import os
import socket
import tempfile
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
from kernelfoundry.stack.device_lease import DeviceLease, gpu_folder
from kernelfoundry.telemetry.logging import get_logger
from kernelfoundry.telemetry.metrics import Metrics
from kernelfoundry.v1 import build_pb2

SERVICE = "executor"
log = get_logger(__name__)


def device_for(hardware: str) -> str:
    """`cpu.x86_64` -> `cpu`; `cuda.h200` -> `cuda:0` (CUDA_VISIBLE_DEVICES picks the device)."""
    backend = hardware.split(".", 1)[0]
    return "cpu" if backend == "cpu" else "cuda:0"


def timing_lock_folder(settings: Settings, device: str) -> str:
    """The lock folder an evaluation's timed runs take ("" for none): on a CPU the host's, shared with the
    builds; on a GPU with several slots one per physical GPU (under the host's timing or device lock
    folder, else the temporary folder), so the slots' timed runs take turns; a one-slot GPU needs none."""
    if device == "cpu":
        return settings.timing_lock_dir
    if settings.executor_slots <= 1:
        return ""
    base = Path(settings.timing_lock_dir or settings.device_lock_dir or tempfile.gettempdir())
    folder = gpu_folder(base / "kf-gpu-timing", device)
    return "" if folder is None else str(folder)


def evaluation_settings(settings: Settings, device: str) -> EvaluationSettings:
    base = EvaluationSettings()
    changes: dict[str, object] = {"deadline_s": settings.evaluation_deadline_s}
    if settings.correctness_trials:
        changes["correctness_trials"] = settings.correctness_trials
    if settings.timed_runs:
        changes["timed_runs"] = settings.timed_runs
    if settings.cpu_threads:
        changes["cpu_threads"] = settings.cpu_threads
    folder = timing_lock_folder(settings, device)
    if folder:
        changes["timing_lock_dir"] = folder
    if settings.torch_compile_baseline is not None:
        changes["measure_torch_compile"] = settings.torch_compile_baseline
    return replace(base, **changes)  # type: ignore[arg-type]


def judge_writable(settings: Settings, device: str) -> tuple[Path, ...]:
    """What the sandboxed judge may write besides its scratch: the timing lock's folder, if any."""
    folder = timing_lock_folder(settings, device)
    if not folder:
        return ()
    Path(folder).mkdir(parents=True, exist_ok=True)
    return (Path(folder),)


async def wire(settings: Settings, bus: Bus, metrics: Metrics) -> ServiceParts:
    hardware = settings.hardware_list[0]
    device = device_for(hardware)
    lease = DeviceLease(settings.device_lock_dir)
    slots = 1 if device == "cpu" else settings.executor_slots  # a CPU's timed runs need its cores
    workers = [
        EvaluationWorker(device, writable=judge_writable(settings, device), lease=lease) for _ in range(slots)
    ]
    identity = executor_identity(
        settings.executor_name, device, socket.gethostname(), os.environ.get("CUDA_VISIBLE_DEVICES")
    )
    log.info("executor ready", hardware=hardware, executor=identity.name, device=identity.device, slots=slots)
    evaluation = evaluation_settings(settings, device)
    handler = EvaluateHandler(bus, workers, evaluation, metrics, identity, max_deliver=settings.max_deliver)
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
        batch=1,  # a slot fetches again only after acking
        concurrency=slots,
    )

    async def close() -> None:
        for worker in workers:
            worker.close()

    return ServiceParts(consumers=[consumer], closers=[close])


def main(settings: Settings) -> None:
    run_service(SERVICE, settings, wire)
