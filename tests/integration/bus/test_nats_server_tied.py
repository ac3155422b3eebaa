"""The embedded broker ends with the process that started it, however that process ends: a stack whose
owner was killed (SIGKILL, a CI timeout) leaves no nats-server behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

STARTER = """
import sys, threading
from pathlib import Path
from kernelfoundry.stack.nats_server import NatsServer

def start():  # from a thread that ends: the broker must still live as long as this process
    server = NatsServer(Path(sys.argv[1]))
    server.start()
    print(server.process.pid, flush=True)

thread = threading.Thread(target=start)
thread.start()
thread.join()
threading.Event().wait()
"""


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ")[1][0] != "Z"  # a zombie is gone, only not reaped yet


def test_a_killed_owner_takes_its_broker_with_it(tmp_path: Path) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None
        broker = int(owner.stdout.readline())
        time.sleep(0.5)
        assert alive(broker), "the broker died with the thread that started it"
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        deadline = time.monotonic() + 10
        while alive(broker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(broker), "the broker outlived the process that started it"
    finally:
        owner.kill()
        owner.wait()
