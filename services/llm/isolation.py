"""Generators that run a task's reference source do so in a sandboxed worker, never in the llm service.

The heuristic proposer traces the reference with torch.fx, which executes the client's Python. So the
service keeps one sandboxed worker process per task source (kernelfoundry.sandbox: scrubbed environment,
no network, a private scratch folder as the only writable place, limits, the whole process tree killed
at the end) and hands it the bus's own request bytes; the worker answers with the CandidatesGenerated
event's bytes. Protobuf both ways, in length-prefixed frames with a size limit: nothing executable
crosses, and nothing the worker says is more than a candidate, which the sealed evaluation judges like
any other. A reference sees only its own task's worker (keyed by a hash of its source, at most
MAX_WORKERS alive, the least recently used stopped first). A worker that dies, answers garbage or
overruns its time is killed and its request becomes a generator_error event; the next request for that
task starts a fresh worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import selectors
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import IO, Any

from kernelfoundry.telemetry.logging import get_logger
from kernelfoundry.v1 import search_pb2

log = get_logger(__name__)

MAX_WORKERS = 4
MAX_FRAME_BYTES = 32 * 1024 * 1024
REQUEST_TIMEOUT_S = 600.0
LOG_TAIL_BYTES = 2000
_HEADER = struct.Struct(">I")


class WorkerFailure(Exception):
    """The worker could not answer: it died, overran its time or broke the framing."""


def write_frame(stream: IO[bytes], payload: bytes) -> None:
    if len(payload) > MAX_FRAME_BYTES:
        raise WorkerFailure(f"a frame of {len(payload)} bytes is over the limit of {MAX_FRAME_BYTES}")
    stream.write(_HEADER.pack(len(payload)) + payload)
    stream.flush()


def read_frame(fd: int, deadline: float | None) -> bytes | None:
    """One frame from `fd`; None at a clean end of stream before a frame starts."""
    header = _read_exactly(fd, _HEADER.size, deadline, allow_eof=True)
    if header is None:
        return None
    (size,) = _HEADER.unpack(header)
    if size > MAX_FRAME_BYTES:
        raise WorkerFailure(f"the worker announced a frame of {size} bytes (limit {MAX_FRAME_BYTES})")
    data = _read_exactly(fd, size, deadline, allow_eof=False)
    assert data is not None
    return data


def _read_exactly(fd: int, size: int, deadline: float | None, allow_eof: bool) -> bytes | None:
    chunks: list[bytes] = []
    got = 0
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while got < size:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise WorkerFailure("the worker did not answer in time")
            if not selector.select(remaining):
                continue
            chunk = os.read(fd, min(size - got, 1 << 20))
            if not chunk:
                if allow_eof and got == 0:
                    return None
                raise WorkerFailure("the worker closed its output in the middle of a frame")
            chunks.append(chunk)
            got += len(chunk)
    return b"".join(chunks)


class GeneratorWorker:
    """One sandboxed worker process serving one task's generation requests, one at a time."""

    def __init__(self, generator: str) -> None:
        self._scratch = tempfile.TemporaryDirectory(prefix="kf-generator-")
        scratch = Path(self._scratch.name)
        self.log_path = scratch / "worker.log"
        argv = [sys.executable, "-m", "kernelfoundry.services.llm.isolated_worker", generator]
        with open(self.log_path, "ab") as log_file:
            self.process = _spawn(argv, scratch, log_file)
        self._lock = threading.Lock()

    def ask(self, request: bytes, timeout_s: float) -> bytes:
        """The worker's answer to one request (blocking; run it in a thread)."""
        with self._lock:
            popen = self.process.popen if hasattr(self.process, "popen") else self.process
            try:
                write_frame(popen.stdin, request)
            except (BrokenPipeError, OSError) as exc:
                raise WorkerFailure(f"the worker is gone ({exc}): {self.log_tail()}") from exc
            answer = read_frame(popen.stdout.fileno(), time.monotonic() + timeout_s)
            if answer is None:
                raise WorkerFailure(f"the worker exited without answering: {self.log_tail()}")
            return answer

    def log_tail(self) -> str:
        with contextlib.suppress(OSError), open(self.log_path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - LOG_TAIL_BYTES))
            return handle.read().decode("utf-8", "replace").strip()
        return ""

    def close(self) -> None:
        if hasattr(self.process, "kill_all"):
            self.process.kill_all()
        else:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, 9)
            self.process.wait()
        self._scratch.cleanup()


def _spawn(argv: list[str], scratch: Path, log_file: IO[bytes]) -> Any:
    try:
        from kernelfoundry.sandbox import SandboxPolicy, spawn_sandboxed
    except ImportError:  # the sandbox package is part of this project; absent only in odd installs
        return subprocess.Popen(
            argv,
            cwd=scratch,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log_file,
            start_new_session=True,
        )
    policy = SandboxPolicy.for_python(scratch, max_open_files=1024)
    return spawn_sandboxed(argv, policy, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log_file)


class GeneratorPool:
    """Sandboxed workers of one generator, one per task source (at most MAX_WORKERS)."""

    def __init__(self, generator: str, max_workers: int = MAX_WORKERS, timeout_s: float = REQUEST_TIMEOUT_S):
        self.generator = generator
        self.max_workers = max_workers
        self.timeout_s = timeout_s
        self._workers: OrderedDict[str, GeneratorWorker] = OrderedDict()
        self._guard = threading.Lock()

    def _worker_for(self, key: str) -> GeneratorWorker:
        with self._guard:
            worker = self._workers.get(key)
            if worker is not None:
                self._workers.move_to_end(key)
                return worker
            worker = GeneratorWorker(self.generator)
            self._workers[key] = worker
            while len(self._workers) > self.max_workers:
                _, oldest = self._workers.popitem(last=False)
                oldest.close()
            return worker

    def _drop(self, key: str, worker: GeneratorWorker) -> None:
        with self._guard:
            if self._workers.get(key) is worker:
                del self._workers[key]
        worker.close()

    def _generate_blocking(self, message: search_pb2.GenerateCandidates) -> search_pb2.CandidatesGenerated:
        key = hashlib.sha256(message.task.reference_source.encode("utf-8", "surrogatepass")).hexdigest()
        worker = self._worker_for(key)
        try:
            answer = worker.ask(message.SerializeToString(), self.timeout_s)
            event = search_pb2.CandidatesGenerated.FromString(answer)
        except Exception as exc:  # WorkerFailure, a protobuf decode error: the worker is not trusted again
            self._drop(key, worker)
            log.warning("generator worker failed", request_id=message.request_id, error=str(exc)[:500])
            raise WorkerFailure(str(exc)) from exc
        if event.request_id != message.request_id:
            self._drop(key, worker)
            raise WorkerFailure("the worker answered another request than the one it was asked")
        return event

    async def generate(self, message: search_pb2.GenerateCandidates) -> search_pb2.CandidatesGenerated:
        return await asyncio.to_thread(self._generate_blocking, message)

    def close(self) -> None:
        with self._guard:
            workers = list(self._workers.values())
            self._workers.clear()
        for worker in workers:
            worker.close()
