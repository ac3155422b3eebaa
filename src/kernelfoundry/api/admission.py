"""Checks of a request that need server state or configuration, run by the interceptor after the
contract: one function per method that has any. Each raises ApiError and creates nothing.

KernelFoundryService.SubmitRun: the run's size against the configured limits, the evolver's capacity,
hardware that some executor or configured pool serves and has a build target, a generator that some llm
service or configured pool serves. LineageService.ImportRun: the archive's size.
"""

from __future__ import annotations

from collections.abc import Callable

from kernelfoundry.api.errors import invalid, precondition
from kernelfoundry.api.limits import ApiLimits, check_archive_size, check_capacity, check_run_size
from kernelfoundry.api.serving import ServingProbe
from kernelfoundry.tasks.model import TaskError
from kernelfoundry.v1 import lineage_pb2, run_pb2, service_pb2

DEFAULT_HARDWARE = "cpu.x86_64"
DEFAULT_POPULATION = 4


def with_defaults(config: run_pb2.RunConfig, default_generator: str) -> run_pb2.RunConfig:
    """The run configuration a submission asks for, with the server's defaults filled in."""
    effective = run_pb2.RunConfig()
    effective.CopyFrom(config)
    effective.hardware = effective.hardware or DEFAULT_HARDWARE
    effective.generator = effective.generator or default_generator
    effective.population = effective.population or DEFAULT_POPULATION
    return effective


class SubmitRunAdmission:
    """SubmitRun's checks: limits, capacity, served hardware and generator."""

    def __init__(
        self,
        limits: ApiLimits,
        probe: ServingProbe,
        default_generator: str,
        active_runs: Callable[[], int],
        build_target_for: Callable[[str], str],
    ) -> None:
        self.limits = limits
        self.probe = probe
        self.default_generator = default_generator
        self.active_runs = active_runs
        self.build_target_for = build_target_for

    async def __call__(self, request: service_pb2.SubmitRunRequest) -> None:
        config = with_defaults(request.config, self.default_generator)
        check_run_size(
            self.limits,
            islands=config.islands,
            population=config.population,
            iterations=config.iterations,
            budget_iterations=request.task.budget.iterations,
        )
        check_capacity(self.limits, self.active_runs())
        try:
            self.build_target_for(config.hardware)
        except TaskError as exc:  # unknown_hardware: no build target is configured for it
            raise invalid(exc.reason, f"config.hardware: {exc.message}") from exc
        if not await self.probe.serves_hardware(config.hardware):
            served = sorted((await self.probe.served()).hardware)
            raise precondition(
                "unserved_hardware",
                f"config.hardware {config.hardware!r} is served by no executor or configured pool here"
                f" (served: {', '.join(served) or 'none'}; KF_SERVED_HARDWARE adds a pool)",
            )
        if not await self.probe.serves_generator(config.generator):
            served = sorted((await self.probe.served()).generators)
            raise precondition(
                "unserved_generator",
                f"config.generator {config.generator!r} is served by no llm service or configured pool here"
                f" (served: {', '.join(served) or 'none'}; KF_SERVED_GENERATORS adds a pool)",
            )


class ImportRunAdmission:
    """ImportRun's check before the archive is read: its size."""

    def __init__(self, limits: ApiLimits) -> None:
        self.limits = limits

    async def __call__(self, request: lineage_pb2.ImportRunRequest) -> None:
        check_archive_size(self.limits, len(request.archive))
