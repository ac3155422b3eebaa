"""Liveness and readiness of a service process, as the metrics endpoint reports them to Kubernetes.

Liveness answers "is this process wedged?": it fails only once something calls `mark_dead` (a supervisor
loop that saw its worker die). Readiness answers "should work be sent here?": every registered check must
pass (for example "the NATS connection is up"). With no checks registered a live process is ready, so a
service that wires nothing still passes its probes once its HTTP endpoint is serving.

Checks run on the HTTP server's thread: they must be cheap, non-blocking reads of state (a flag, a
connection's `is_connected`), never network calls, and this module must never import a transport.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from threading import Lock

Check = Callable[[], bool]


@dataclass(frozen=True)
class HealthReport:
    ok: bool
    failing: tuple[str, ...]

    def body(self) -> str:
        if self.ok:
            return "ok\n"
        return "".join(f"failing: {name}\n" for name in self.failing)


class Health:
    """Thread-safe registry of readiness checks plus a liveness flag."""

    def __init__(self) -> None:
        self._lock = Lock()
        self._checks: dict[str, Check] = {}
        self._dead_reason: str | None = None

    def add_check(self, name: str, check: Check) -> None:
        """Register (or replace) a readiness check; a check that raises counts as failing."""
        with self._lock:
            self._checks[name] = check

    def remove_check(self, name: str) -> None:
        with self._lock:
            self._checks.pop(name, None)

    def mark_dead(self, reason: str) -> None:
        """Make liveness fail from now on, so Kubernetes restarts the container."""
        with self._lock:
            self._dead_reason = reason

    def liveness(self) -> HealthReport:
        with self._lock:
            reason = self._dead_reason
        return HealthReport(ok=reason is None, failing=() if reason is None else (reason,))

    def readiness(self) -> HealthReport:
        live = self.liveness()
        if not live.ok:
            return live
        with self._lock:
            checks = list(self._checks.items())
        failing: list[str] = []
        for name, check in checks:
            try:
                passed = bool(check())
            except Exception:
                passed = False
            if not passed:
                failing.append(name)
        return HealthReport(ok=not failing, failing=tuple(failing))
