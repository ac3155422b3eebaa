"""Telemetry shared by every service: Prometheus metrics, structured logging, health and queue lag.

Services import from here; nothing in this package imports a transport (nats, grpc, pymongo, httpx).
"""

from kernelfoundry.telemetry.endpoint import MetricsServer, start_metrics_server
from kernelfoundry.telemetry.health import Health, HealthReport
from kernelfoundry.telemetry.logging import configure_logging, get_logger
from kernelfoundry.telemetry.metrics import ALL_METRICS, Metrics, MetricSpec, subject_kind
from kernelfoundry.telemetry.queue_lag import QueueLagMonitor, consumer_pending_probe

__all__ = [
    "ALL_METRICS",
    "Health",
    "HealthReport",
    "MetricSpec",
    "Metrics",
    "MetricsServer",
    "QueueLagMonitor",
    "configure_logging",
    "consumer_pending_probe",
    "get_logger",
    "start_metrics_server",
    "subject_kind",
]
