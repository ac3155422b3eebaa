"""The judge <-> runner channel: an AF_UNIX SOCK_SEQPACKET socketpair carrying JSON, fds alongside.

Every message is one datagram: a 4-byte little-endian length, then that many bytes of UTF-8 JSON (an
object). The judge may attach file descriptors to a command (socket.send_fds); the runner never sends
any, and whatever it sends is read with a hard size limit: a datagram longer than the limit (the kernel
reports truncation), a length that disagrees with the datagram, bytes that are not JSON or JSON that is
not an object is a `ChannelViolation`. No pickle, no other executable format, in either direction.
Pure transport: what a message means is messages.py's business.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import struct
import time
from typing import Any

HEADER = struct.Struct("<I")
REPLY_LIMIT_BYTES = 64 * 1024  # runner -> judge
COMMAND_LIMIT_BYTES = 4 * 1024 * 1024  # judge -> runner (glue source, tensor layouts)
MAX_FDS = 512
SOCKET_BUFFER_BYTES = 8 * 1024 * 1024


class ChannelClosed(Exception):
    """The other end is gone (EOF)."""


class ChannelTimeout(Exception):
    """No message before the deadline."""


class ChannelViolation(Exception):
    """A message that breaks the framing: oversized, truncated, not a JSON object."""


def channel_pair() -> tuple[socket.socket, socket.socket]:
    """(judge end, runner end); the runner end is inheritable so it can be passed to the runner."""
    judge_end, runner_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for end in (judge_end, runner_end):
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            with contextlib.suppress(OSError):
                end.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER_BYTES)
    runner_end.set_inheritable(True)
    return judge_end, runner_end


def encode(message: dict[str, Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
    return HEADER.pack(len(body)) + body


def decode(datagram: bytes, limit: int) -> dict[str, Any]:
    if len(datagram) < HEADER.size:
        raise ChannelViolation(f"a message of {len(datagram)} bytes is shorter than its length header")
    (size,) = HEADER.unpack_from(datagram)
    if size > limit:
        raise ChannelViolation(f"a message declares {size} bytes, over the limit of {limit}")
    if size != len(datagram) - HEADER.size:
        raise ChannelViolation(f"a message declares {size} bytes but carries {len(datagram) - HEADER.size}")
    try:
        value = json.loads(datagram[HEADER.size :].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise ChannelViolation(f"a message is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ChannelViolation(f"a message is a JSON {type(value).__name__}, not an object")
    return value


def send(sock: socket.socket, message: dict[str, Any], fds: tuple[int, ...] | list[int] = ()) -> None:
    """One message (and file descriptors) as one datagram; ChannelClosed when the peer is gone."""
    data = encode(message)
    try:
        if fds:
            socket.send_fds(sock, [data], list(fds))
        else:
            sock.sendall(data)
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise ChannelClosed("the other end closed the channel") from exc


def _wait_readable(sock: socket.socket, deadline: float | None) -> None:
    if deadline is None:
        return
    wait = deadline - time.monotonic()
    if wait <= 0:
        raise ChannelTimeout
    ready, _, _ = select.select([sock], [], [], wait)
    if not ready:
        raise ChannelTimeout


def receive(sock: socket.socket, deadline: float | None, limit: int = REPLY_LIMIT_BYTES) -> dict[str, Any]:
    """One message without file descriptors (what the judge reads from the runner)."""
    _wait_readable(sock, deadline)
    try:
        data, ancillary, flags, _ = sock.recvmsg(HEADER.size + limit + 1, socket.CMSG_SPACE(4))
    except ConnectionResetError as exc:
        raise ChannelClosed("the other end reset the channel") from exc
    if ancillary:
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                for i in range(0, len(payload) - len(payload) % 4, 4):
                    os.close(struct.unpack_from("i", payload, i)[0])
        raise ChannelViolation("a message carried file descriptors; the runner may send none")
    if not data and not flags:
        raise ChannelClosed("the other end closed the channel")
    if flags & socket.MSG_TRUNC or len(data) > HEADER.size + limit:
        raise ChannelViolation(f"a message is longer than the limit of {limit} bytes")
    return decode(data, limit)


def receive_with_fds(
    sock: socket.socket, deadline: float | None, limit: int = COMMAND_LIMIT_BYTES
) -> tuple[dict[str, Any], list[int]]:
    """One message and the descriptors attached to it (what the runner reads from the judge)."""
    _wait_readable(sock, deadline)
    data, fds, flags, _ = socket.recv_fds(sock, HEADER.size + limit + 1, MAX_FDS)
    if not data:
        raise ChannelClosed("the other end closed the channel")
    if flags & socket.MSG_TRUNC:
        raise ChannelViolation(f"a message is longer than the limit of {limit} bytes")
    return decode(data, limit), list(fds)


def pending(sock: socket.socket) -> bool:
    """Whether a message is waiting (the runner may only answer; an extra message is a violation).
    End of file is not a message: a runner that exits after its last reply sends none."""
    ready, _, _ = select.select([sock], [], [], 0)
    if not ready:
        return False
    try:
        return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except (BlockingIOError, ConnectionResetError):
        return False
