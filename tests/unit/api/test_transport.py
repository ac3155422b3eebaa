"""The public servers' channel arguments: explicit sizes both ways, a send floor for reflection, keepalive."""

from __future__ import annotations

import pytest

from kernelfoundry.api import transport
from kernelfoundry.api.interceptor import _service_name


def test_sizes_are_explicit_both_ways() -> None:
    options = dict(transport.server_options(max_receive_bytes=3 << 20, max_send_bytes=5 << 20))
    assert options["grpc.max_receive_message_length"] == 3 << 20
    assert options["grpc.max_send_message_length"] == 5 << 20


def test_the_send_limit_leaves_room_for_reflection_answers() -> None:
    options = dict(transport.server_options(max_receive_bytes=1024, max_send_bytes=1024))
    assert options["grpc.max_receive_message_length"] == 1024
    assert options["grpc.max_send_message_length"] == transport.MIN_SEND_BYTES


def test_keepalive_pings_quiet_streams_and_tolerates_client_pings() -> None:
    options = dict(transport.server_options(max_receive_bytes=1024, max_send_bytes=1024))
    assert options["grpc.keepalive_time_ms"] == transport.KEEPALIVE_TIME_MS
    assert options["grpc.keepalive_timeout_ms"] == transport.KEEPALIVE_TIMEOUT_MS
    assert options["grpc.keepalive_timeout_ms"] < options["grpc.keepalive_time_ms"]
    assert options["grpc.http2.max_pings_without_data"] == 0
    # a client may ping more often than the server does, never below the floor the server enforces
    assert options["grpc.http2.min_ping_interval_without_data_ms"] <= options["grpc.keepalive_time_ms"]
    assert options["grpc.keepalive_permit_without_calls"] == 1


@pytest.mark.parametrize("receive,send", [(0, 1024), (1024, 0), (-1, 1024)])
def test_sizes_must_be_positive(receive: int, send: int) -> None:
    with pytest.raises(ValueError, match="positive"):
        transport.server_options(max_receive_bytes=receive, max_send_bytes=send)


@pytest.mark.parametrize(
    "method,service",
    [
        ("/grpc.health.v1.Health/Check", "grpc.health.v1.Health"),
        (
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
            "grpc.reflection.v1alpha.ServerReflection",
        ),
        ("/kernelfoundry.v1.KernelFoundryService/SubmitRun", "kernelfoundry.v1.KernelFoundryService"),
    ],
)
def test_the_edge_reads_the_service_of_a_method(method: str, service: str) -> None:
    assert _service_name(method) == service
