"""Shared by the adversarial suite: one build cache, a TCP listener in the service's namespace, a folder
the service may write, and a service secret in the environment of every worker the suite starts."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from attacks import Arsenal

from kernelfoundry.toolchains import BuildCache

SECRET_NAME = "KF_ADVERSARIAL_SECRET"


@pytest.fixture(scope="session")
def listener() -> Iterator[socket.socket]:
    """A TCP listener on 127.0.0.1 in this (the service's) network namespace; no attack may reach it."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setblocking(False)
        yield server


@pytest.fixture(scope="session")
def service_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder the service may write and a candidate may not (attacks try to create files in it)."""
    return tmp_path_factory.mktemp("kf-service-dir")


@pytest.fixture(scope="session")
def arsenal(tmp_path_factory: pytest.TempPathFactory, listener: socket.socket, service_dir: Path) -> Arsenal:
    substitutions = {"@PORT@": str(listener.getsockname()[1]), "@SERVICE_DIR@": str(service_dir)}
    return Arsenal(BuildCache(tmp_path_factory.mktemp("kf-attack-builds")), substitutions)


@pytest.fixture(scope="session", autouse=True)
def service_secret() -> Iterator[str]:
    """A secret in the service's environment, set before any worker starts (workers inherit it)."""
    value = "adversarial-" + os.urandom(8).hex()
    previous = os.environ.get(SECRET_NAME)
    os.environ[SECRET_NAME] = value
    yield value
    if previous is None:
        os.environ.pop(SECRET_NAME, None)
    else:
        os.environ[SECRET_NAME] = previous
