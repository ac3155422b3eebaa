"""A hostile runner for tests/adversarial/test_background_work_recheck.py: the real runner, plus one helper
thread that does BURST_S of CPU work after every reply to a call, then waits for the next one.

Run as `python bursting_runner.py <runner arguments>`. Each burst ends long before the judge's re-check
window does (it is shorter than the judge's own work between two calls), so only the rule that a window
over its allowance after two calls in a row convicts can catch it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

BURST_S = 0.008


def main() -> None:
    from kernelfoundry.evaluation import channel, runner

    original_send = channel.send
    wake = threading.Event()

    def helper() -> None:
        while True:
            wake.wait()
            wake.clear()
            end = time.thread_time() + BURST_S  # CPU time of this thread, however busy the host
            while time.thread_time() < end:
                pass

    threading.Thread(target=helper, daemon=True).start()

    def send(sock: Any, message: dict[str, Any], fds: Any = ()) -> None:
        original_send(sock, message, fds)
        if message.get("kind") == "called":
            wake.set()

    runner.channel.send = send  # type: ignore[assignment]
    runner.main()


if __name__ == "__main__":
    main()
