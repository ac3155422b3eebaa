"""Announcing runs that a freshly started stack resumed, so that none takes the machine silently.

The evolver resumes every run the lineage lists as running when it starts (services/evolver/resume.py).
After the command line starts a stack it asks the lineage API for those runs and names each one with the
command that cancels it. Best effort: an unreachable lineage API is said, never fatal.
"""

from __future__ import annotations

import asyncio

from rich.console import Console

from kernelfoundry.api.auth import PLAINTEXT_CLIENT, ClientSecurity
from kernelfoundry.client import LineageClient
from kernelfoundry.v1 import lineage_pb2

LOOKUP_TIMEOUT_S = 10.0


async def running_runs(
    store_address: str, timeout_s: float = LOOKUP_TIMEOUT_S, security: ClientSecurity | None = None
) -> list[lineage_pb2.RunRecord]:
    client = LineageClient(store_address, security)
    try:
        if not await client.ready(timeout_s):
            raise ConnectionError(f"no lineage API answers at {store_address}")
        return await client.list_runs(status="running")
    finally:
        await client.close()


def resumed_lines(runs: list[lineage_pb2.RunRecord]) -> list[str]:
    """One line per resumed run, with how to cancel it."""
    return [
        f"resumed run {r.run_id} ({r.task_name} on {r.hardware}) from an earlier session; "
        f"`kernelfoundry cancel {r.run_id}` ends it"
        for r in runs
    ]


def announce_resumed(console: Console, store_address: str, timeout_s: float = LOOKUP_TIMEOUT_S) -> list[str]:
    """Print the runs the (local, plaintext) stack resumed; returns their ids."""
    try:
        runs = asyncio.run(running_runs(store_address, timeout_s, PLAINTEXT_CLIENT))
    except Exception as exc:  # best effort: the run itself does not depend on this
        console.print(f"could not list resumed runs: {exc}", markup=False)
        return []
    for line in resumed_lines(runs):
        console.print(line, markup=False, highlight=False)
    return [r.run_id for r in runs]
