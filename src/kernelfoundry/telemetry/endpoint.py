"""The HTTP endpoint every service serves on KF_METRICS_PORT: /metrics, /healthz and /readyz.

/metrics is prometheus_client's exposition of the process's own registry (content negotiation and
gzip included); /healthz is liveness and /readyz readiness, both plain text, 200 or 503, from a
`Health`. The server runs on a daemon thread so it never holds the asyncio loop, and port 0 binds a
free port (tests, `kernelfoundry up` running every service in one machine).

This module must never expose anything but metrics and health on this port: no admin actions.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from kernelfoundry.telemetry.health import Health, HealthReport

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]

METRICS_PATH = "/metrics"
LIVENESS_PATH = "/healthz"
READINESS_PATH = "/readyz"


class _QuietHandler(WSGIRequestHandler):
    # Probes hit the endpoint every few seconds; access lines would drown the service's own logs.
    def log_message(self, format: str, *args: Any) -> None:
        return


def telemetry_app(registry: CollectorRegistry, health: Health) -> WsgiApp:
    """WSGI app routing /metrics to prometheus_client and /healthz, /readyz to `health`."""
    metrics_app = make_wsgi_app(registry)

    def respond(report: HealthReport, start_response: StartResponse) -> list[bytes]:
        status = "200 OK" if report.ok else "503 Service Unavailable"
        start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
        return [report.body().encode()]

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == LIVENESS_PATH:
            return respond(health.liveness(), start_response)
        if path == READINESS_PATH:
            return respond(health.readiness(), start_response)
        if path in (METRICS_PATH, "/"):
            return metrics_app(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [f"not_found: {path} (serves {METRICS_PATH}, {LIVENESS_PATH}, {READINESS_PATH})\n".encode()]

    return app


class MetricsServer:
    """A running telemetry endpoint; `close()` (or leaving the `with` block) stops it."""

    def __init__(
        self, port: int, registry: CollectorRegistry, health: Health | None = None, host: str = "0.0.0.0"
    ) -> None:
        self.health = health if health is not None else Health()
        self._server = make_server(
            host, port, telemetry_app(registry, self.health), ThreadingWSGIServer, handler_class=_QuietHandler
        )
        self.host = host
        self.port: int = self._server.server_port
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"kf-metrics-{self.port}", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> MetricsServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def start_metrics_server(
    port: int, registry: CollectorRegistry, health: Health | None = None, host: str = "0.0.0.0"
) -> int:
    """Serve /metrics, /healthz and /readyz for the life of the process; returns the bound port.

    Port 0 picks a free port. Raises OSError when the port is taken. Use `MetricsServer` directly when the
    caller must stop the endpoint before the process exits.
    """
    return MetricsServer(port, registry, health, host).port
