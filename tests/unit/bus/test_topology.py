"""Stream replicas and limits from the settings (pure)."""

from __future__ import annotations

import pytest

from kernelfoundry.bus.topology import HOUR_S, StreamLimits, Topology, differs
from kernelfoundry.config import load_settings


def test_the_settings_give_replicas_and_limits() -> None:
    settings = load_settings(
        stream_replicas=3,
        events_max_age_h=24,
        events_max_bytes=1000,
        artifacts_max_age_h=2,
        artifacts_max_bytes=0,
    )
    topology = Topology.from_settings(settings)
    assert topology.replicas == 3
    assert topology.events == StreamLimits(24 * HOUR_S, 1000)
    assert topology.artifacts.max_age_s == 2 * HOUR_S
    assert topology.artifacts.nats_max_bytes == -1  # 0: no limit


@pytest.mark.parametrize("replicas", [0, 6])
def test_replicas_jetstream_cannot_keep_are_refused(replicas: int) -> None:
    with pytest.raises(ValueError, match="replicas"):
        Topology(replicas=replicas)


def test_negative_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        StreamLimits(max_age_s=-1)


def test_differs_names_what_changes_and_ages_compare_to_the_second() -> None:
    current = {"num_replicas": 1, "max_age": 3600.0000004, "max_bytes": -1}
    assert differs(current, {"num_replicas": 1, "max_age": 3600.0, "max_bytes": -1}) == {}
    assert differs(current, {"num_replicas": 3, "max_age": 7200.0}) == {
        "num_replicas": (1, 3),
        "max_age": (3600.0000004, 7200.0),
    }
