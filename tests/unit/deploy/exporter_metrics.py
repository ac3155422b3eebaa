"""Series of the NATS exporter (natsio/prometheus-nats-exporter, `-jsz=all`) that alerts and the dashboard
query, with the labels its JetStream collector gives them (collector/jsz.go)."""

from __future__ import annotations

SERVER_LABELS = frozenset({"server_id", "server_name", "cluster", "domain", "meta_leader", "is_meta_leader"})
STREAM_LABELS = SERVER_LABELS | {
    "account",
    "account_name",
    "account_id",
    "stream_name",
    "stream_leader",
    "is_stream_leader",
    "stream_raft_group",
}

NATS_EXPORTER: dict[str, set[str]] = {
    "jetstream_server_total_message_bytes": set(SERVER_LABELS),
    "jetstream_server_max_storage": set(SERVER_LABELS),
    "jetstream_stream_total_bytes": set(STREAM_LABELS),
}
