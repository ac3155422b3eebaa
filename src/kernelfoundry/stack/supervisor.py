"""The one-machine stack: an embedded JetStream server plus every service as its own process.

`kernelfoundry up` and `kernelfoundry run` (when nothing answers at the gRPC address) use it; the
integration tests use it too, to kill and restart single services. Services are plain child processes
(`python -m kernelfoundry serve <name>`) with their settings in the environment; their logs go to
<state>/logs/<service>.log.

Executors are spread over the devices (`executor_processes`): one process per visible GPU, each pinned to
its device by CUDA_VISIBLE_DEVICES (nvidia-smi's index, in PCI order), and `cpu_executors` CPU executors
(one unless asked). The executors of one hardware share its durable consumer, so the work queue hands
each candidate to one of them.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kernelfoundry.bus.permissions import deployment_users, executor_user_name, render_authorization
from kernelfoundry.config import Settings
from kernelfoundry.sandbox.process import spawn_tied
from kernelfoundry.stack.hardware import HardwareTarget, detect
from kernelfoundry.stack.nats_server import NatsServer

SERVICES = ("store", "llm", "compiler", "executor", "evolver")


LOCAL_API_PLAINTEXT = (
    "KF_API_TOKEN",
    "KF_API_TLS_CERT",
    "KF_API_TLS_KEY",
    "KF_API_TLS_CA",
    "KF_API_TLS",
    "KF_API_TLS_SERVER_NAME",
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class ExecutorProcess:
    """One executor the stack starts: its service name, the hardware it serves and its device pinning."""

    name: str
    hardware: str
    env: dict[str, str]

    @property
    def log_name(self) -> str:
        return self.name.replace(":", "-")


def executor_processes(
    hardware: list[HardwareTarget], cpu_executors: int = 1, gpu_executors: int = 0
) -> list[ExecutorProcess]:
    """The executors for `hardware`: `cpu_executors` for the CPU (named with a number when more than one)
    and one per GPU (`gpu_executors` > 0: the first that many, by index), each seeing only its device."""
    planned: list[ExecutorProcess] = []
    gpus = sorted((index, target.execute) for target in hardware for index in target.devices)
    if gpu_executors > 0:
        gpus = gpus[:gpu_executors]
    for target in hardware:
        if target.devices:
            continue
        for number in range(cpu_executors):
            name = f"executor:{target.execute}" + (f":{number}" if cpu_executors > 1 else "")
            planned.append(ExecutorProcess(name, target.execute, {"KF_EXECUTOR_NAME": name}))
    for index, execute in gpus:
        name = f"executor:{execute}:{index}"
        env = {
            "KF_EXECUTOR_NAME": name,
            "CUDA_VISIBLE_DEVICES": str(index),
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",  # CUDA's index then names nvidia-smi's device
        }
        planned.append(ExecutorProcess(name, execute, env))
    return planned


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
        self.process = spawn_tied(  # ends with this process, even when it is killed
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
    cpu_executors: int | None = None  # None: KF_CPU_EXECUTORS
    gpu_executors: int | None = None  # None: KF_GPU_EXECUTORS
    nats: NatsServer | None = None
    services: dict[str, ServiceProcess] = field(default_factory=dict)
    nats_url: str = ""
    # each service connects as its own least-privilege NATS user, as in Kubernetes (default: an open server)
    nats_users: bool = False
    _nats_credentials: dict[str, tuple[str, str]] = field(default_factory=dict)  # service -> (user, password)

    def start(self, ready_timeout_s: float = 120.0) -> None:
        self.state_dir = self.state_dir.resolve()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.grpc_address = self.grpc_address or f"127.0.0.1:{free_port()}"
        self.store_grpc_address = self.store_grpc_address or f"127.0.0.1:{free_port()}"
        settings = Settings()
        if self.hardware is None:
            self.hardware = detect(os.environ.get("CUDA_VISIBLE_DEVICES"))
        if self.cpu_executors is None:
            self.cpu_executors = settings.cpu_executors
        if self.gpu_executors is None:
            self.gpu_executors = settings.gpu_executors
        config, server_env = self._nats_auth(settings) if self.nats_users else ("", {})
        self.nats = NatsServer(
            self.state_dir / "nats",
            log_file=self.state_dir / "logs" / "nats.log",
            config=config,
            env=server_env,
        )
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
                # a validation on a GPU waits for its evaluation (stack.device_lease)
                "KF_DEVICE_LOCK_DIR": str(self.state_dir / "device-locks"),
                # the evolver accepts runs for the hardware this stack starts executors for, from the start
                "KF_SERVED_HARDWARE": ",".join(dict.fromkeys(e.hardware for e in self.executors())),
                "PYTHONUNBUFFERED": "1",
            }
        )
        # the local stack's APIs are plaintext without a token, whatever this shell sets for remote ones
        # (unset, not emptied: an empty KF_API_TLS is no boolean and every service would refuse to start)
        for name in LOCAL_API_PLAINTEXT:
            env.pop(name, None)
        env.update(self.extra_env)
        return env

    def _nats_auth(self, settings: Settings) -> tuple[str, dict[str, str]]:
        """The NATS server's users for this stack's services, with fresh passwords (kept for the services)."""
        generator = self.extra_env.get("KF_GENERATOR") or settings.generator
        builds = sorted({h.build for h in self.hardware or []})
        pools = list(dict.fromkeys(e.hardware for e in self.executors()))
        users = {u.name: u for u in deployment_users([generator], builds, pools)}
        names = {"store": "kf-store", "llm": "kf-llm", "evolver": "kf-evolver", "compiler": "kf-compiler"}
        names |= {e.name: executor_user_name(e.hardware) for e in self.executors()}
        passwords = {name: secrets.token_hex(16) for name in users}
        self._nats_credentials = {service: (user, passwords[user]) for service, user in names.items()}
        server_env = {users[name].password_variable: pw for name, pw in passwords.items()}
        return render_authorization(list(users.values())), server_env

    def _nats_env(self, service: str) -> dict[str, str]:
        if service not in self._nats_credentials:
            return {}
        user, password = self._nats_credentials[service]
        return {"KF_NATS_USER": user, "KF_NATS_PASSWORD": password}

    def _service_specs(self) -> list[ServiceProcess]:
        assert self.hardware is not None
        logs = self.state_dir / "logs"
        specs: list[ServiceProcess] = []
        base = self._base_env()
        for name in ("store", "llm", "evolver"):
            specs.append(ServiceProcess(name, {**base, **self._nats_env(name)}, logs / f"{name}.log"))
        builds = ",".join(sorted({h.build for h in self.hardware}))
        compiler = {**base, "KF_HARDWARE": builds, **self._nats_env("compiler")}
        specs.append(ServiceProcess("compiler", compiler, logs / "compiler.log"))
        for executor in self.executors():
            env = {**base, "KF_HARDWARE": executor.hardware, **executor.env, **self._nats_env(executor.name)}
            specs.append(ServiceProcess(executor.name, env, logs / f"{executor.log_name}.log"))
        return specs

    def executors(self) -> list[ExecutorProcess]:
        """The executors this stack runs for its hardware and executor counts."""
        cpu = 1 if self.cpu_executors is None else self.cpu_executors
        return executor_processes(self.hardware or [], cpu, self.gpu_executors or 0)

    def executor_services(self) -> list[ServiceProcess]:
        return [s for key, s in self.services.items() if key.startswith("executor")]

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
