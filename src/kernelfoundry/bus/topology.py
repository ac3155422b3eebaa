"""How the streams are kept: replicas and the limits of the event history, dead letters and artifacts.

KF_WORK is a work queue: a request leaves it when a worker acknowledges it, so it has no limits of its
own. KF_EVENTS and KF_DEADLETTER keep the history for `events_max_age_s` and at most `events_max_bytes`
each, dropping the oldest first; the store's database keeps the lineage, so nothing is lost that a
service needs once the store has read it. The artifact bucket keeps a built unit for `artifacts_max_age_s`
and at most `artifacts_max_bytes` (a full bucket refuses new units: their builds fail and are retried);
the store also deletes a candidate's unit once its result is recorded (after the
redeliveries' grace: kernelfoundry.bus.artifact_cleanup). Every stream and the
bucket are created with `replicas` (3 in production, where NATS runs three servers); the services that
manage the topology (kernelfoundry.bus.permissions.TOPOLOGY_OWNERS) bring existing streams to these
values when they start. Zero means no limit. JetStream reserves a stream's byte limit on the servers when
the stream is created: the byte limits together must fit the servers' max_file_store, or creation fails
with "insufficient storage resources"; so they are off by default (the embedded stack cannot know its
disk) and set per deployment (the Kubernetes manifests size them to their volumes). Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from kernelfoundry.config import Settings

HOUR_S = 3600.0


@dataclass(frozen=True)
class StreamLimits:
    """The age (seconds) and size (bytes) a stream keeps; 0: no limit."""

    max_age_s: float = 0.0
    max_bytes: int = 0

    def __post_init__(self) -> None:
        if self.max_age_s < 0 or self.max_bytes < 0:
            raise ValueError(f"stream limits cannot be negative: {self.max_age_s} s, {self.max_bytes} bytes")

    @property
    def nats_max_bytes(self) -> int:
        return self.max_bytes if self.max_bytes > 0 else -1  # JetStream's "no limit"


@dataclass(frozen=True)
class Topology:
    replicas: int = 1
    events: StreamLimits = StreamLimits()
    artifacts: StreamLimits = StreamLimits()

    def __post_init__(self) -> None:
        if not 1 <= self.replicas <= 5:
            raise ValueError(f"JetStream keeps 1 to 5 replicas of a stream, not {self.replicas}")

    @classmethod
    def from_settings(cls, settings: Settings) -> Topology:
        return cls(
            replicas=settings.stream_replicas,
            events=StreamLimits(settings.events_max_age_h * HOUR_S, settings.events_max_bytes),
            artifacts=StreamLimits(settings.artifacts_max_age_h * HOUR_S, settings.artifacts_max_bytes),
        )


def differs(current: dict[str, object], wanted: dict[str, object]) -> dict[str, tuple[object, object]]:
    """The settings in `wanted` that `current` does not have: {name: (current, wanted)}. Ages compare to
    the second (the server reports nanoseconds, converted to float seconds)."""
    changes: dict[str, tuple[object, object]] = {}
    for key, value in wanted.items():
        have = current.get(key)
        if isinstance(value, float) and isinstance(have, (int, float)):
            if round(float(have)) == round(value):
                continue
        elif have == value:
            continue
        changes[key] = (have, value)
    return changes
