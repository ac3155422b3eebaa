"""Builds step aside while a CPU evaluation times its runs (a host-wide lock with writer preference)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from kernelfoundry.stack.quiet_host import QuietHost
from kernelfoundry.stack.supervisor import Stack


def _start(fn: Callable[[], object]) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


def test_builds_run_side_by_side(tmp_path: Path) -> None:
    host = QuietHost(tmp_path)
    inside = threading.Barrier(2, timeout=5)

    def build() -> None:
        with host.sharing():
            inside.wait()  # both builds hold the host at once, or this times out

    threads = [_start(build) for _ in range(2)]
    for t in threads:
        t.join(5)
    assert not inside.broken


def test_timing_waits_for_the_build_in_flight_and_new_builds_wait_for_timing(tmp_path: Path) -> None:
    host = QuietHost(tmp_path)
    events: list[str] = []
    build_started, release_build = threading.Event(), threading.Event()

    def first_build() -> None:
        with host.sharing():
            events.append("build 1 start")
            build_started.set()
            release_build.wait(5)
            events.append("build 1 end")

    def timed() -> None:
        with host.timing():
            events.append("timing start")
            time.sleep(0.2)
            events.append("timing end")

    def second_build() -> None:
        with host.sharing():
            events.append("build 2 start")

    a = _start(first_build)
    build_started.wait(5)
    b = _start(timed)
    time.sleep(0.2)  # timing now holds the gate and waits for build 1
    c = _start(second_build)
    time.sleep(0.2)  # build 2 waits at the gate: writer preference
    assert events == ["build 1 start"]
    release_build.set()
    for t in (a, b, c):
        t.join(5)
    assert events == ["build 1 start", "build 1 end", "timing start", "timing end", "build 2 start"]


def test_a_process_that_dies_holding_the_host_releases_it(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", f"from kernelfoundry.stack.quiet_host import QuietHost\n"
         f"import time\nwith QuietHost({str(tmp_path)!r}).timing():\n    print('held', flush=True)\n"
         f"    time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    holder.kill()
    holder.wait(5)
    done = threading.Event()

    def build() -> None:
        with QuietHost(tmp_path).sharing():
            done.set()

    _start(build).join(5)
    assert done.is_set()


def test_an_empty_folder_turns_the_lock_off(tmp_path: Path) -> None:
    host = QuietHost("")
    assert not host.enabled
    with host.timing(), host.sharing():  # would deadlock if it locked anything
        pass


def test_the_embedded_stack_gives_its_services_one_lock_folder(tmp_path: Path) -> None:
    env = Stack(state_dir=tmp_path)._base_env()
    assert env["KF_TIMING_LOCK_DIR"] == str(tmp_path / "locks")
