"""What both fuzz campaigns share: a stack in a folder of its own, its processes' memory, and the search for
files written where nothing may write.

Test support, not product code. The stack's state lives in `<work>/stack` and every process's temporary
files in `<work>/tmp` (TMPDIR), so that after a campaign the only place a service may have written is
`<work>`. Hostile inputs name a canary (a unique token) in their paths and in the files their code tries
to create; `canary_hits` looks for that token in the places a path from client or bus text could land.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from tempfile import TemporaryDirectory

from kernelfoundry.lineage import RunRecord
from kernelfoundry.lineage.export import export_run_bytes
from kernelfoundry.lineage.sqlite_repository import SqliteLineageRepository
from kernelfoundry.stack.hardware import cpu_target
from kernelfoundry.stack.supervisor import Stack

from .harness import CHAOS_ENV

# A deployment's own limits, set low so that an accepted hostile request stays small on two cores; the
# requests beyond them are refused naming the limit (part of what is fuzzed).
FUZZ_ENV = {
    **CHAOS_ENV,
    "KF_API_MAX_POPULATION": "4",
    "KF_API_MAX_ISLANDS": "2",
    "KF_API_MAX_ITERATIONS": "10",
    "KF_API_MAX_REQUEST_BYTES": str(1024 * 1024),
    "KF_API_MAX_ARCHIVE_BYTES": str(4 * 1024 * 1024),
    "KF_API_MAX_DECOMPRESSED_BYTES": str(8 * 1024 * 1024),
}
ROOT = Path(__file__).resolve().parents[2]


def new_canary() -> str:
    return f"kf-fuzz-canary-{secrets.token_hex(6)}"


@contextmanager
def fuzz_stack(extra_env: dict[str, str] | None = None) -> Iterator[tuple[Stack, Path]]:
    """A CPU stack whose state and temporary files live in one fresh folder; (stack, that folder)."""
    with TemporaryDirectory(prefix="kf-fuzz-") as work:
        root = Path(work)
        (root / "tmp").mkdir()
        env = {**FUZZ_ENV, "TMPDIR": str(root / "tmp"), **(extra_env or {})}
        stack = Stack(state_dir=root / "stack", hardware=[cpu_target()], extra_env=env)
        stack.start()
        try:
            yield stack, root
        finally:
            stack.stop()


def rss_mib(stack: Stack) -> dict[str, float]:
    """Resident memory of each service process (MiB); 0 for a process that is not running."""
    found = {}
    for name, service in stack.services.items():
        process = service.process
        found[name] = 0.0
        if process is None or process.poll() is not None:
            continue
        try:
            for line in Path(f"/proc/{process.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    found[name] = round(int(line.split()[1]) / 1024, 1)
        except OSError:
            pass
    return found


def alive(stack: Stack) -> dict[str, bool]:
    """Which processes are running: the broker and every service."""
    assert stack.nats is not None
    return {"broker": stack.nats.alive(), **{n: s.alive() for n, s in stack.services.items()}}


def restarts_from_logs(stack: Stack) -> dict[str, int]:
    """How many times each service started (a process that died and came back starts twice)."""
    counts = {}
    for name, service in stack.services.items():
        try:
            text = service.log_path.read_text(errors="replace")
        except OSError:
            text = ""
        counts[name] = text.count('"service started"')
    return counts


def _walk(root: Path, depth: int) -> Iterator[Path]:
    try:
        entries = list(os.scandir(root))
    except OSError:
        return
    for entry in entries:
        yield Path(entry.path)
        if depth > 0 and entry.is_dir(follow_symlinks=False):
            yield from _walk(Path(entry.path), depth - 1)


def canary_hits(canary: str, work: Path, extra_roots: Iterable[Path] = ()) -> list[str]:
    """Every path that names the canary, in the places a path built from hostile text could land: the
    filesystem root, /tmp, the home folder, the repository and its parent (two levels deep), and the
    campaign's own folder (whole)."""
    roots = [(Path("/"), 1), (Path("/tmp"), 2), (Path.home(), 1), (ROOT, 2), (ROOT.parent, 1), (work, 64)]
    roots += [(Path(r), 2) for r in extra_roots]
    hits = set()
    for root, depth in roots:
        for path in _walk(root, depth):
            if canary in path.name:
                hits.add(str(path))
    return sorted(hits)


def sample_archives() -> list[bytes]:
    """Well-formed run archives (a finished run, a stopped one) for import cases to send and damage."""

    async def build() -> list[bytes]:
        out = []
        for run_id, status in (("run-f0220000001", "finished"), ("run-f0220000002", "stopped")):
            repo = await SqliteLineageRepository.open(":memory:")
            try:
                await repo.save_run(
                    RunRecord(
                        run_id=run_id,
                        task_name="imported",
                        hardware="cpu.x86_64",
                        status=status,
                        config={"hardware": "cpu.x86_64", "generator": "heuristic", "iterations": 1},
                        created_at=datetime(2026, 11, 1, tzinfo=UTC),
                    )
                )
                data, _ = await export_run_bytes(repo, run_id)
                out.append(data)
            finally:
                await repo.close()
        return out

    return asyncio.run(build())


def store_caught_up(stack: Stack) -> bool:
    """True when the store's durable consumer has acknowledged every event in the history."""
    import nats

    from kernelfoundry.bus import subjects

    async def probe() -> bool:
        nc = await nats.connect(stack.nats_url, connect_timeout=2, max_reconnect_attempts=0)
        try:
            js = nc.jetstream(timeout=5)
            info = await js.consumer_info(subjects.EVENTS_STREAM, "store")
            stream = await js.stream_info(subjects.EVENTS_STREAM)
            return (
                info.num_pending == 0
                and info.num_ack_pending == 0
                and info.ack_floor.stream_seq >= stream.state.last_seq
            )
        finally:
            await nc.close()

    try:
        return asyncio.run(probe())
    except Exception:  # the broker or the store's consumer is not there yet
        return False


def store_running_runs(stack: Stack) -> list[str]:
    """Run ids the lineage (through the store's gRPC API) lists as running."""
    from kernelfoundry.client import LineageClient

    async def read() -> list[str]:
        client = LineageClient(stack.store_grpc_address)
        try:
            return sorted(r.run_id for r in await client.list_runs(status="running"))
        finally:
            await client.close()

    return asyncio.run(read())
