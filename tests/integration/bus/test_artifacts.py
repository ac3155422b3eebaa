"""Artifacts in the object store: the same unit put again stays as it is; a read never waits forever."""

from __future__ import annotations

import time

import pytest

from kernelfoundry.bus.jetstream import JetStreamBus, artifact_digest
from kernelfoundry.stack.nats_server import NatsServer


async def test_putting_the_same_bytes_again_keeps_the_stored_object(nats_server: NatsServer) -> None:
    bus = await JetStreamBus.connect(nats_server.url, name="t")
    try:
        await bus.put_artifact("c1.so", b"unit" * 100_000)
        store = await bus.artifacts()
        first = await store.get_info("c1.so")
        await bus.put_artifact("c1.so", b"unit" * 100_000)  # a repeated compile request
        again = await store.get_info("c1.so")
        assert again.nuid == first.nuid
        assert first.digest == artifact_digest(b"unit" * 100_000)
        await bus.put_artifact("c1.so", b"other unit")  # different bytes do replace it
        assert (await store.get_info("c1.so")).nuid != first.nuid
        assert await bus.get_artifact("c1.so") == b"other unit"
    finally:
        await bus.close()


async def test_a_read_whose_chunks_are_gone_fails_instead_of_waiting_forever(nats_server: NatsServer) -> None:
    bus = await JetStreamBus.connect(nats_server.url, name="t")
    try:
        await bus.put_artifact("c2.so", b"unit" * 1000)
        store = await bus.artifacts()
        info = await store.get_info("c2.so")
        # what a replacement does to the old object's chunks while a reader holds its description
        await bus.js.purge_stream("OBJ_kf-artifacts", subject=f"$O.kf-artifacts.C.{info.nuid}")
        started = time.monotonic()
        with pytest.raises(LookupError, match="not read within"):
            await bus.get_artifact("c2.so", timeout_s=1.0)
        assert time.monotonic() - started < 10
    finally:
        await bus.close()
