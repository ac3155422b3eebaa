"""The worker/child framing: round trips, deadlines and a vanished peer."""

from __future__ import annotations

import os
import time

import pytest

from kernelfoundry.evaluation.protocol import ChildGone, DeadlinePassed, read_message, write_message


def test_message_round_trips_through_a_pipe() -> None:
    read_end, write_end = os.pipe()
    try:
        write_message(write_end, {"report": [1, 2, 3]})
        assert read_message(read_end, time.monotonic() + 5) == {"report": [1, 2, 3]}
    finally:
        os.close(read_end)
        os.close(write_end)


def test_read_gives_up_at_the_deadline() -> None:
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(DeadlinePassed):
            read_message(read_end, time.monotonic() + 0.05)
    finally:
        os.close(read_end)
        os.close(write_end)


def test_closed_pipe_means_the_peer_is_gone() -> None:
    read_end, write_end = os.pipe()
    os.close(write_end)
    try:
        with pytest.raises(ChildGone):
            read_message(read_end, time.monotonic() + 5)
    finally:
        os.close(read_end)
