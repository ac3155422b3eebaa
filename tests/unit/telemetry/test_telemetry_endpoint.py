"""Behaviour of the telemetry HTTP endpoint: /metrics, /healthz, /readyz on a real socket."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest

from kernelfoundry.telemetry.endpoint import MetricsServer, start_metrics_server
from kernelfoundry.telemetry.health import Health
from kernelfoundry.telemetry.metrics import Metrics


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_port_zero_binds_a_free_port_and_serves_the_registry() -> None:
    metrics = Metrics(process_collectors=False)
    metrics.evaluations_total.labels(hardware="cuda.h200", outcome="correct").inc(3)
    with MetricsServer(0, metrics.registry, host="127.0.0.1") as server:
        assert server.port > 0
        status, body = _get(server.port, "/metrics")
    assert status == 200
    assert 'kf_evaluations_total{hardware="cuda.h200",outcome="correct"} 3.0' in body


def test_start_metrics_server_returns_the_bound_port() -> None:
    metrics = Metrics(process_collectors=False)
    port = start_metrics_server(0, metrics.registry, host="127.0.0.1")
    status, body = _get(port, "/metrics")
    assert status == 200
    assert "kf_runs_active" in body


def test_healthz_and_readyz_pass_for_a_service_that_registered_no_checks() -> None:
    with MetricsServer(0, Metrics(process_collectors=False).registry, host="127.0.0.1") as server:
        assert _get(server.port, "/healthz") == (200, "ok\n")
        assert _get(server.port, "/readyz") == (200, "ok\n")


def test_readyz_fails_and_names_the_failing_check() -> None:
    health = Health()
    connected = {"nats": False}
    health.add_check("nats_connected", lambda: connected["nats"])
    health.add_check("always", lambda: True)
    with MetricsServer(0, Metrics(process_collectors=False).registry, health, host="127.0.0.1") as server:
        assert _get(server.port, "/readyz") == (503, "failing: nats_connected\n")
        assert _get(server.port, "/healthz") == (200, "ok\n")
        connected["nats"] = True
        assert _get(server.port, "/readyz") == (200, "ok\n")


def test_a_check_that_raises_counts_as_failing() -> None:
    def broken() -> bool:
        raise RuntimeError("no connection object yet")

    health = Health()
    health.add_check("broken", broken)
    report = health.readiness()
    assert not report.ok
    assert report.failing == ("broken",)


def test_mark_dead_fails_liveness_and_readiness() -> None:
    health = Health()
    with MetricsServer(0, Metrics(process_collectors=False).registry, health, host="127.0.0.1") as server:
        health.mark_dead("executor_worker_exited")
        assert _get(server.port, "/healthz") == (503, "failing: executor_worker_exited\n")
        assert _get(server.port, "/readyz")[0] == 503


def test_removed_check_no_longer_counts() -> None:
    health = Health()
    health.add_check("draining", lambda: False)
    health.remove_check("draining")
    assert health.readiness().ok


def test_unknown_path_is_404_naming_the_served_paths() -> None:
    with MetricsServer(0, Metrics(process_collectors=False).registry, host="127.0.0.1") as server:
        status, body = _get(server.port, "/admin")
    assert status == 404
    assert "/admin" in body and "/metrics" in body


def test_a_taken_port_raises_oserror() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError):
            MetricsServer(port, Metrics(process_collectors=False).registry, host="127.0.0.1")


def test_close_stops_serving() -> None:
    server = MetricsServer(0, Metrics(process_collectors=False).registry, host="127.0.0.1")
    port = server.port
    server.close()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
