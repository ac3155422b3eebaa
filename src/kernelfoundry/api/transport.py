"""The gRPC channel arguments of every public server: explicit message size limits and keepalive.

Sizes: a request above `max_receive_bytes` is refused by gRPC itself with RESOURCE_EXHAUSTED before it is
read (the evolver: KF_API_MAX_REQUEST_BYTES; the store: KF_API_MAX_ARCHIVE_BYTES plus the envelope), and
a response above `max_send_bytes` is not sent (RESOURCE_EXHAUSTED to the client) instead of growing
without bound. The send limit is never below MIN_SEND_BYTES: a reflection answer carries a service's
file descriptors with everything they import (buf.validate's rules are most of the ~80 KB), and a
deployment with small request limits must still describe itself to grpcurl.

Keepalive, for the long-lived StreamRunProgress call: the server pings a connection after
KEEPALIVE_TIME_MS without activity and closes it when the ping is not answered within KEEPALIVE_TIMEOUT_MS,
so a client that vanished (a dropped node, a NAT entry that expired) frees its stream; the pings also keep
idle-timeout proxies and load balancers from cutting a quiet stream (a run can go minutes between
progress events). Clients may ping too, no more often than MIN_CLIENT_PING_INTERVAL_MS, also without a
call in flight; a client pinging faster is answered GOAWAY after MAX_PING_STRIKES strikes.
"""

from __future__ import annotations

MIN_SEND_BYTES = 1024 * 1024
KEEPALIVE_TIME_MS = 30_000
KEEPALIVE_TIMEOUT_MS = 10_000
MIN_CLIENT_PING_INTERVAL_MS = 10_000
MAX_PING_STRIKES = 2


def server_options(*, max_receive_bytes: int, max_send_bytes: int) -> list[tuple[str, int]]:
    """The channel arguments of a public gRPC server (grpc.aio.server(options=...))."""
    if max_receive_bytes <= 0 or max_send_bytes <= 0:
        raise ValueError(f"message size limits must be positive: {max_receive_bytes}, {max_send_bytes}")
    return [
        ("grpc.max_receive_message_length", max_receive_bytes),
        ("grpc.max_send_message_length", max(max_send_bytes, MIN_SEND_BYTES)),
        ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
        ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),  # keep pinging a quiet stream (the default stops at 2)
        ("grpc.http2.min_ping_interval_without_data_ms", MIN_CLIENT_PING_INTERVAL_MS),
        ("grpc.http2.max_ping_strikes", MAX_PING_STRIKES),
    ]
