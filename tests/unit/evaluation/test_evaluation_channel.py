"""The judge <-> runner channel: framing, size limits, descriptors, and what counts as a violation."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator

import pytest

from kernelfoundry.evaluation import channel


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    judge, runner = channel.channel_pair()
    yield judge, runner
    judge.close()
    runner.close()


def test_json_message_round_trips_with_descriptors(pair: tuple[socket.socket, socket.socket]) -> None:
    judge, runner = pair
    read_end, write_end = os.pipe()
    try:
        channel.send(judge, {"op": "load", "n": 1}, (read_end,))
        message, fds = channel.receive_with_fds(runner, time.monotonic() + 5)
        assert message == {"op": "load", "n": 1}
        assert len(fds) == 1
        os.write(write_end, b"x")
        assert os.read(fds[0], 1) == b"x"  # the descriptor names the same pipe
        os.close(fds[0])
    finally:
        os.close(read_end)
        os.close(write_end)


def test_oversized_reply_is_a_violation(pair: tuple[socket.socket, socket.socket]) -> None:
    judge, runner = pair
    channel.send(runner, {"kind": "called", "padding": "x" * (channel.REPLY_LIMIT_BYTES + 10)})
    with pytest.raises(channel.ChannelViolation, match="limit"):
        channel.receive(judge, time.monotonic() + 5)


def test_length_header_must_match_the_datagram(pair: tuple[socket.socket, socket.socket]) -> None:
    judge, runner = pair
    runner.sendall(channel.HEADER.pack(50) + b"{}")
    with pytest.raises(channel.ChannelViolation, match="declares"):
        channel.receive(judge, time.monotonic() + 5)


@pytest.mark.parametrize("body", [b"not json", b"[1, 2]", b"\xff\xfe"])
def test_reply_must_be_a_json_object(body: bytes, pair: tuple[socket.socket, socket.socket]) -> None:
    judge, runner = pair
    runner.sendall(channel.HEADER.pack(len(body)) + body)
    with pytest.raises(channel.ChannelViolation):
        channel.receive(judge, time.monotonic() + 5)


def test_runner_may_not_send_descriptors(pair: tuple[socket.socket, socket.socket]) -> None:
    judge, runner = pair
    read_end, write_end = os.pipe()
    try:
        socket.send_fds(runner, [channel.encode({"kind": "idle"})], [read_end])
        with pytest.raises(channel.ChannelViolation, match="descriptors"):
            channel.receive(judge, time.monotonic() + 5)
    finally:
        os.close(read_end)
        os.close(write_end)


def test_silence_ends_at_the_deadline_and_eof_means_gone(pair: tuple[socket.socket, socket.socket]) -> None:
    judge, runner = pair
    with pytest.raises(channel.ChannelTimeout):
        channel.receive(judge, time.monotonic() + 0.05)
    runner.close()
    with pytest.raises(channel.ChannelClosed):
        channel.receive(judge, time.monotonic() + 5)


def test_pending_sees_a_second_message_but_not_an_exit(pair: tuple[socket.socket, socket.socket]) -> None:
    judge, runner = pair
    assert not channel.pending(judge)
    channel.send(runner, {"kind": "idle"})
    assert channel.pending(judge)
    channel.receive(judge, time.monotonic() + 5)
    runner.close()
    assert not channel.pending(judge)


def test_nan_never_crosses_as_json() -> None:
    with pytest.raises(ValueError):
        channel.encode({"claimed_ns": float("nan")})
