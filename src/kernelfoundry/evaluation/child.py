"""The evaluation child process: `python -m kernelfoundry.evaluation.child [--pdeathsig]`.

Reads EvaluationRequests from stdin, answers reports on the original stdout, and evaluates each with
engine.run_evaluation in this process, so that a crash or a hang kills only this process. Anything a
unit prints goes to stderr (fd 1 is redirected there). Dies with its parent: PR_SET_PDEATHSIG when
asked (only safe when spawned from the parent's main thread), a watchdog on the parent's pid, and EOF
on stdin. Never imports transport code.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time

from kernelfoundry.evaluation import reasons
from kernelfoundry.evaluation.protocol import ChildGone, read_message, write_message

PR_SET_PDEATHSIG = 1
WATCHDOG_PERIOD_S = 0.5


def _die_with_parent(use_pdeathsig: bool) -> None:
    parent = os.getppid()
    if use_pdeathsig and sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(1)
            time.sleep(WATCHDOG_PERIOD_S)

    threading.Thread(target=watch, name="kf-parent-watchdog", daemon=True).start()
    if os.getppid() != parent:
        os._exit(1)


def main() -> None:
    protocol_out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _die_with_parent("--pdeathsig" in sys.argv[1:])
    import torch  # loaded before the first request so its import never eats a deadline

    from kernelfoundry.evaluation.engine import run_evaluation

    if "--cuda" in sys.argv[1:]:
        torch.cuda.init()
    stdin = sys.stdin.fileno()
    write_message(protocol_out, {"ready": True, "pid": os.getpid()})
    while True:
        try:
            request = read_message(stdin)
        except ChildGone:
            return
        report = run_evaluation(request)
        recycle = report.reason in reasons.RECYCLING_REASONS
        write_message(protocol_out, {"report": report.to_dict(), "recycle": recycle})
        if recycle:
            return


if __name__ == "__main__":
    main()
