"""The store's lineage API over a SQLite file, served on a free port from a background event loop: the
server the CLI's lineage and report commands talk to in their tests."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import grpc

from kernelfoundry.lineage import LineageRepository, open_repository
from kernelfoundry.services.store.api import LineageApi
from kernelfoundry.v1 import lineage_pb2_grpc

T = TypeVar("T")


class StoreServer:
    def __init__(self, db: Path, seed: Callable[[LineageRepository], Awaitable[None]] | None = None) -> None:
        self.db, self.seed = db, seed
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.address = ""

    def __enter__(self) -> StoreServer:
        self.thread.start()
        self.address = self.call(self._start())
        return self

    def __exit__(self, *_: object) -> None:
        self.call(self._stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on the server's loop (where its repository lives) and return its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(30)

    async def _start(self) -> str:
        self.repository = await open_repository(f"sqlite:///{self.db.resolve()}")
        if self.seed is not None:
            await self.seed(self.repository)
        self.server = grpc.aio.server()
        lineage_pb2_grpc.add_LineageServiceServicer_to_server(LineageApi(self.repository), self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        await self.server.start()
        return f"127.0.0.1:{port}"

    async def _stop(self) -> None:
        await self.server.stop(grace=None)
        await self.repository.close()
