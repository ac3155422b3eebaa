"""A hostile runner for tests: the real runner with one behaviour changed, named by its first argument.

Run as `python fake_runner.py MODE <runner arguments>`; the judge cannot tell it from the real one until it
misbehaves. Modes: forge_low (claims 1 ns per call), forge_high (claims 10 s), oversized (a 1 MiB
reply), not_json, wrong_nonce, extra_message, unknown_field, busy_after_reply (burns CPU in a thread after
each call's reply), child_process (starts a child at the first call).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any


def main() -> None:
    from kernelfoundry.evaluation import channel, runner

    mode = sys.argv.pop(1)
    original_call = runner.Runner.call
    original_send = channel.send
    state: dict[str, Any] = {"calls": 0}

    def call(self: runner.Runner, command: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        reply = original_call(self, command, fds)
        state["calls"] += 1
        if mode == "forge_low":
            reply["claimed_ns"] = 1
        elif mode == "forge_high":
            reply["claimed_ns"] = 10_000_000_000
        elif mode == "unknown_field":
            reply["verdict"] = "correct"
        elif mode == "child_process" and state["calls"] == 1:
            state["child"] = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        return reply

    def send(sock: Any, message: dict[str, Any], fds: Any = ()) -> None:
        if message.get("kind") != "called":
            return original_send(sock, message, fds)
        if mode == "oversized":
            message["padding"] = "x" * (1 << 20)
        elif mode == "not_json":
            sock.sendall(channel.HEADER.pack(9) + b"not json!")
            return None
        elif mode == "wrong_nonce":
            message["nonce"] = "0" * 32
        original_send(sock, message, fds)
        if mode == "extra_message":
            original_send(sock, message, fds)
        if mode == "busy_after_reply":

            def burn() -> None:
                end = time.perf_counter() + 0.05
                while time.perf_counter() < end:
                    pass

            threading.Thread(target=burn, daemon=True).start()
        return None

    runner.Runner.call = call  # type: ignore[method-assign]
    runner.channel.send = send  # type: ignore[assignment]
    runner.main()


if __name__ == "__main__":
    main()
