"""Limits that protect the services, from configuration; pure checks of a run request against them.

The protos bound every count by what the types and the design allow; these are the deployment's own,
lower limits (KF_API_MAX_*). A request beyond one is INVALID_ARGUMENT naming the limit and its value; a
request that is fine but finds the evolver full is RESOURCE_EXHAUSTED.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelfoundry.api.errors import exhausted, invalid
from kernelfoundry.config import Settings


@dataclass(frozen=True)
class ApiLimits:
    max_islands: int = 8
    max_population: int = 64
    max_iterations: int = 1000
    max_candidates_in_flight: int = 256
    max_active_runs: int = 64
    max_request_bytes: int = 8 * 1024 * 1024
    max_archive_bytes: int = 64 * 1024 * 1024
    max_decompressed_bytes: int = 512 * 1024 * 1024

    @classmethod
    def from_settings(cls, settings: Settings) -> ApiLimits:
        return cls(
            max_islands=settings.api_max_islands,
            max_population=settings.api_max_population,
            max_iterations=settings.api_max_iterations,
            max_candidates_in_flight=settings.api_max_candidates_in_flight,
            max_active_runs=settings.api_max_active_runs,
            max_request_bytes=settings.api_max_request_bytes,
            max_archive_bytes=settings.api_max_archive_bytes,
            max_decompressed_bytes=settings.api_max_decompressed_bytes,
        )


def _at_most(field: str, value: int, limit: int, setting: str) -> None:
    if value > limit:
        raise invalid(
            "limit_exceeded", f"{field} is {value}; this deployment allows at most {limit} ({setting})"
        )


def check_run_size(
    limits: ApiLimits, *, islands: int, population: int, iterations: int, budget_iterations: int
) -> None:
    """A run's requested size against the limits (0 means the default, which is within them)."""
    _at_most("config.islands", islands, limits.max_islands, "KF_API_MAX_ISLANDS")
    _at_most("config.population", population, limits.max_population, "KF_API_MAX_POPULATION")
    _at_most("config.iterations", iterations, limits.max_iterations, "KF_API_MAX_ITERATIONS")
    _at_most("task.budget.iterations", budget_iterations, limits.max_iterations, "KF_API_MAX_ITERATIONS")
    in_flight = max(1, population) * max(1, islands)
    _at_most(
        "config.population x config.islands",
        in_flight,
        limits.max_candidates_in_flight,
        "KF_API_MAX_CANDIDATES_IN_FLIGHT",
    )


def check_capacity(limits: ApiLimits, active_runs: int) -> None:
    if active_runs >= limits.max_active_runs:
        raise exhausted(
            "too_many_runs",
            f"{active_runs} runs are running; this deployment runs at most {limits.max_active_runs}"
            " at once (KF_API_MAX_ACTIVE_RUNS): retry when one ends",
        )


def check_archive_size(limits: ApiLimits, size: int) -> None:
    if size > limits.max_archive_bytes:
        raise exhausted(
            "archive_too_large",
            f"archive is {size} bytes; this deployment imports at most {limits.max_archive_bytes}"
            " (KF_API_MAX_ARCHIVE_BYTES)",
        )
