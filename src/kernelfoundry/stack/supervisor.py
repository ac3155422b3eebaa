"""The one-machine stack: an embedded JetStream server plus every service as its own process.

`kernelfoundry up` and `kernelfoundry run` (when nothing answers at the gRPC address) use it; the
integration tests use it too, to kill and restart single services. Services are plain child processes
(`python -m kernelfoundry serve <name>`) with their settings in the environment; their logs go to
<state>/logs/<service>.log.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kernelfoundry.stack.hardware import HardwareTarget, detect
from kernelfoundry.stack.nats_server import NatsServer

SERVICES = ("store", "llm", "compiler", "executor", "evolver")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ServiceProcess:
    name: str
    env: dict[str, str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        cmd = [sys.executable, "-m", "kernelfoundry", "serve", self.name.split(":")[0]]
        self.process = subprocess.Popen(
            cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout_s: float = 15.0) -> None:
        if not self.alive():
            return
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """Kill the service and everything it started (its evaluation child too)."""
        if self.process is None or self.process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()


@dataclass
class Stack:
    state_dir: Path
    grpc_address: str = ""
    store_grpc_address: str = ""
    hardware: list[HardwareTarget] | None = None
    extra_env: Mapping[str, str] = field(default_factory=dict)
    nats: NatsServer | None = None
    services: dict[str, ServiceProcess] = field(default_factory=dict)
    nats_url: str = ""

    def start(self, ready_timeout_s: float = 120.0) -> None:
        self.state_dir = self.state_dir.resolve()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.grpc_address = self.grpc_address or f"127.0.0.1:{free_port()}"
        self.store_grpc_address = self.store_grpc_address or f"127.0.0.1:{free_port()}"
        self.hardware = self.hardware if self.hardware is not None else detect()
        self.nats = NatsServer(self.state_dir / "nats", log_file=self.state_dir / "logs" / "nats.log")
        (self.state_dir / "logs").mkdir(parents=True, exist_ok=True)
        self.nats_url = self.nats.start()
        for spec in self._service_specs():
            self.services[spec.name] = spec
            spec.start()
        self.wait_ready(ready_timeout_s)

    def _base_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "KF_NATS_URL": self.nats_url,
                "KF_STATE_DIR": str(self.state_dir),
                "KF_GRPC_ADDRESS": self.grpc_address,
                "KF_STORE_GRPC_ADDRESS": self.store_grpc_address,
                "KF_METRICS_PORT": "0",
                # one machine: builds wait while the CPU executor times (kernelfoundry.stack.quiet_host)
                "KF_TIMING_LOCK_DIR": str(self.state_dir / "locks"),
                # the evolver accepts runs for the hardware this stack starts executors for, from the start
                "KF_SERVED_HARDWARE": ",".join(t.execute for t in self.hardware or ()),
                "PYTHONUNBUFFERED": "1",
            }
        )
        env.update(self.extra_env)
        return env

    def _service_specs(self) -> list[ServiceProcess]:
        assert self.hardware is not None
        logs = self.state_dir / "logs"
        specs: list[ServiceProcess] = []
        base = self._base_env()
        for name in ("store", "llm", "evolver"):
            specs.append(ServiceProcess(name, dict(base), logs / f"{name}.log"))
        builds = ",".join(sorted({h.build for h in self.hardware}))
        specs.append(ServiceProcess("compiler", {**base, "KF_HARDWARE": builds}, logs / "compiler.log"))
        for target in self.hardware:
            if not target.devices:
                env = {**base, "KF_HARDWARE": target.execute}
                specs.append(
                    ServiceProcess(f"executor:{target.execute}", env, logs / f"executor-{target.execute}.log")
                )
                continue
            # One executor per device: each owns its GPU, and all share the model's durable consumer.
            for index in target.devices:
                env = {**base, "KF_HARDWARE": target.execute, "CUDA_VISIBLE_DEVICES": str(index)}
                name = f"executor:{target.execute}:{index}"
                specs.append(ServiceProcess(name, env, logs / f"executor-{target.execute}-{index}.log"))
        return specs

    def wait_ready(self, timeout_s: float) -> None:
        host, _, port = self.grpc_address.rpartition(":")
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            dead = [s.name for s in self.services.values() if not s.alive()]
            if dead:
                raise RuntimeError(
                    f"service(s) {', '.join(dead)} exited during start; see {self.state_dir / 'logs'}"
                )
            try:
                with socket.create_connection((host, int(port)), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.2)
        raise TimeoutError(
            f"the evolver's gRPC API did not answer at {self.grpc_address} within {timeout_s}s"
        )

    def service(self, name: str) -> ServiceProcess:
        matches = [s for key, s in self.services.items() if key == name or key.startswith(f"{name}:")]
        if not matches:
            raise KeyError(f"no service {name!r} in this stack (have: {', '.join(self.services)})")
        return matches[0]

    def stop(self) -> None:
        # Evolver first (no new work), workers next, store last (it drains the history), broker at the end.
        order = (
            ["evolver", "llm", "compiler"]
            + [k for k in self.services if k.startswith("executor")]
            + ["store"]
        )
        for key in order:
            if key in self.services:
                self.services[key].stop()
        if self.nats is not None:
            self.nats.stop()
