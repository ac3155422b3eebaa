"""Framing of messages between EvaluationWorker and its judge process: 8-byte length, then JSON.

Only the worker and its own judge speak it, over private pipes; both are trusted, and still nothing on
this pipe is pickled (requests travel as wire.request_to_dict, reports as EvaluationReport.to_dict).
Reads honour a deadline so a hung judge never blocks its parent.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from typing import Any

HEADER = struct.Struct("<Q")
MAX_MESSAGE_BYTES = 256 * 1024 * 1024


class ChildGone(Exception):
    """The other end closed the pipe (the judge died)."""


class DeadlinePassed(Exception):
    """No complete message before the deadline."""


def write_message(fd: int, message: Any) -> None:
    body = json.dumps(message, separators=(",", ":")).encode()
    data = HEADER.pack(len(body)) + body
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BrokenPipeError as exc:
            raise ChildGone("pipe closed while writing") from exc
        view = view[written:]


def _read_exactly(fd: int, size: int, deadline: float | None) -> bytes:
    chunks: list[bytes] = []
    remaining = size
    while remaining:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0:
                raise DeadlinePassed
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                raise DeadlinePassed
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise ChildGone("pipe closed while reading")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_message(fd: int, deadline: float | None = None) -> Any:
    """One message; `deadline` is a time.monotonic() value, None waits forever."""
    (size,) = HEADER.unpack(_read_exactly(fd, HEADER.size, deadline))
    if size > MAX_MESSAGE_BYTES:
        raise ChildGone(f"a message of {size} bytes is over the limit")
    return json.loads(_read_exactly(fd, size, deadline))
