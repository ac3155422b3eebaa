"""What this deployment serves: execution hardware, build targets and generators.

A name is served when a configured pool serves it (KF_SERVED_HARDWARE, KF_SERVED_GENERATORS, KF_GENERATOR:
pools that scale to zero) or when some worker's durable consumer on the work stream filters its subject
(kf.execute.<hw>, kf.compile.<target>, kf.generate.<name>). `served_from_subjects` is the pure part; the
probe reads the consumers from the bus and keeps the answer for a few seconds, so a burst of requests
costs one lookup.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

import grpc

from kernelfoundry.api.errors import ApiError
from kernelfoundry.bus import subjects
from kernelfoundry.bus.protocol import Bus
from kernelfoundry.config import Settings


@dataclass(frozen=True)
class Served:
    hardware: frozenset[str] = frozenset()
    build_targets: frozenset[str] = frozenset()
    generators: frozenset[str] = frozenset()


def served_from_subjects(filter_subjects: Iterable[str]) -> Served:
    """The names the work consumers' filter subjects serve (wildcards serve nothing by name)."""
    hardware: set[str] = set()
    builds: set[str] = set()
    generators: set[str] = set()
    for subject in filter_subjects:
        if "*" in subject or ">" in subject:
            continue
        for prefix, names in (
            (subjects.EXECUTE_PREFIX, hardware),
            (subjects.COMPILE_PREFIX, builds),
            (subjects.GENERATE_PREFIX, generators),
        ):
            if subject.startswith(prefix + "."):
                names.add(subject[len(prefix) + 1 :])
    return Served(frozenset(hardware), frozenset(builds), frozenset(generators))


SubjectLister = Callable[[], Awaitable[list[str]]]


@dataclass
class ServingProbe:
    """Configured names plus what the work stream's consumers serve, cached for `ttl_s` seconds."""

    list_subjects: SubjectLister
    configured_hardware: frozenset[str] = frozenset()
    configured_generators: frozenset[str] = frozenset()
    ttl_s: float = 2.0
    clock: Callable[[], float] = time.monotonic
    _cached: Served | None = field(default=None, init=False)
    _at: float = field(default=0.0, init=False)

    async def served(self) -> Served:
        now = self.clock()
        if self._cached is None or now - self._at > self.ttl_s:
            consumers = served_from_subjects(await self.list_subjects())
            self._cached = Served(
                hardware=consumers.hardware | self.configured_hardware,
                build_targets=consumers.build_targets,
                generators=consumers.generators | self.configured_generators,
            )
            self._at = now
        return self._cached

    async def serves_hardware(self, hardware: str) -> bool:
        return hardware in (await self.served()).hardware

    async def serves_generator(self, generator: str) -> bool:
        return generator in (await self.served()).generators


def work_consumer_subjects(bus: Bus, stream: str = subjects.WORK_STREAM) -> SubjectLister:
    """A lister of the filter subjects of every consumer on the work stream."""

    async def list_subjects() -> list[str]:
        try:
            return await bus.consumer_subjects(stream)
        except Exception as exc:  # the bus did not answer: not the client's mistake, and not "unserved"
            raise ApiError(
                grpc.StatusCode.UNAVAILABLE, "bus_unavailable", "the message bus did not answer; retry"
            ) from exc

    return list_subjects


def probe_for(settings: Settings, bus: Bus) -> ServingProbe:
    """The probe of this deployment: its configured pools plus the work stream's consumers."""
    return ServingProbe(
        work_consumer_subjects(bus),
        configured_hardware=frozenset(settings.served_hardware_list),
        configured_generators=frozenset(settings.served_generators_list),
    )
