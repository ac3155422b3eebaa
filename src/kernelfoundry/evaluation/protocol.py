"""Framing of messages between the evaluation worker and its child: 8-byte length, then a pickle.

Only the worker and its own child speak it, over private pipes; nothing else may feed it (pickle).
Reads honour a deadline so a hung child never blocks its parent.
"""

from __future__ import annotations

import os
import pickle
import select
import struct
import time
from typing import Any

HEADER = struct.Struct("<Q")


class ChildGone(Exception):
    """The other end closed the pipe (the child died)."""


class DeadlinePassed(Exception):
    """No complete message before the deadline."""


def write_message(fd: int, message: Any) -> None:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
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
    return pickle.loads(_read_exactly(fd, size, deadline))
