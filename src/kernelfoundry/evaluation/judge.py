"""The judge process: `python -m kernelfoundry.evaluation.judge [--pdeathsig] [--device D]`.

The trusted side of the sealed evaluation, the long-lived child of EvaluationWorker. Reads requests
(JSON, wire.py) from stdin and answers reports (JSON of EvaluationReport.to_dict) on the original
stdout. It never loads a unit nor executes glue: each candidate runs in a fresh runner process that the
judge spawns through the sandbox (runner_client.py); one idle runner is started ahead, torch imported,
so process start stays off the evaluation's path, and no runner ever serves a second candidate.
Hardening: PR_SET_DUMPABLE 0 (a same-uid process cannot ptrace the judge or read its memory) and
PR_SET_CHILD_SUBREAPER (a daemon a candidate double-forks is reparented here, seen and killed). Dies
with its parent (PR_SET_PDEATHSIG when asked, a parent-pid watchdog, EOF on stdin).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time

from kernelfoundry.evaluation.backends import backend_for_device
from kernelfoundry.evaluation.protocol import ChildGone, read_message, write_message
from kernelfoundry.evaluation.reasons import RECYCLING_REASONS
from kernelfoundry.evaluation.runner_client import RunnerProcess
from kernelfoundry.evaluation.wire import request_from_dict

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
WATCHDOG_PERIOD_S = 0.5


def _prctl(option: int, value: int) -> bool:
    with contextlib.suppress(OSError, AttributeError):
        return ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0) == 0
    return False


def harden() -> list[str]:
    """The process-level protections this judge runs with (names, for the record)."""
    applied = []
    if sys.platform.startswith("linux"):
        if _prctl(PR_SET_DUMPABLE, 0):
            applied.append("not dumpable")
        if _prctl(PR_SET_CHILD_SUBREAPER, 1):
            applied.append("child subreaper")
    return applied


def _die_with_parent(use_pdeathsig: bool) -> None:
    parent = os.getppid()
    if use_pdeathsig and sys.platform.startswith("linux"):
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                os._exit(1)
            time.sleep(WATCHDOG_PERIOD_S)

    threading.Thread(target=watch, name="kf-parent-watchdog", daemon=True).start()
    if os.getppid() != parent:
        os._exit(1)


def _reap_adopted() -> None:
    """Collect the exit status of adopted orphans (the judge is their subreaper) as they end."""
    with contextlib.suppress(ChildProcessError):
        while True:
            pid, _ = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                return


class RunnerPool:
    """Keeps one idle runner started ahead; hands each candidate a runner no one has used."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.backend = backend_for_device(device)
        self._idle: RunnerProcess | None = None

    def prepare(self) -> None:
        """Start the next runner now; a failure to start waits for `take`, inside an evaluation,
        where it becomes that evaluation's worker_error instead of ending the judge."""
        if self._idle is None or not self._idle.alive():
            try:
                self._idle = RunnerProcess(self.backend, self.device)
            except Exception:
                self._idle = None

    def take(self) -> RunnerProcess:
        """A runner for the candidate now arriving; the next candidate's starts at once, while this
        one's trials run (before the candidate's runner has loaded anything), so that no candidate
        waits for a process start."""
        runner = self._idle if self._idle is not None and self._idle.alive() else None
        self._idle = None
        if runner is None:
            runner = RunnerProcess(self.backend, self.device)
        self.prepare()
        return runner

    def settle(self) -> None:
        """Wait until the next runner has started (torch imported, device initialised): called before
        a candidate is timed, so that no start competes with its timed calls. A runner that fails to
        start is dropped here; `take` starts another."""
        if self._idle is None:
            return
        try:
            self._idle.wait_ready()
        except Exception:
            self._idle.close()
            self._idle = None

    def close(self) -> None:
        if self._idle is not None:
            self._idle.close()
            self._idle = None


def main() -> None:
    protocol_out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    args = sys.argv[1:]
    _die_with_parent("--pdeathsig" in args)
    device = args[args.index("--device") + 1] if "--device" in args else "cpu"
    protections = harden()
    import torch  # loaded before the first request so its import never eats a deadline

    from kernelfoundry.evaluation.engine import run_evaluation

    if backend_for_device(device).memory == "staged":
        torch.cuda.init()
    pool = RunnerPool(device)
    pool.prepare()
    stdin = sys.stdin.fileno()
    write_message(protocol_out, {"ready": True, "pid": os.getpid(), "protections": protections})
    try:
        while True:
            try:
                request = request_from_dict(read_message(stdin))
            except ChildGone:
                return
            report, broken = run_evaluation(request, pool.take, before_timing=pool.settle)
            _reap_adopted()
            recycle = broken or report.reason in RECYCLING_REASONS
            write_message(protocol_out, {"report": report.to_dict(), "recycle": recycle})
            if recycle:
                return
            pool.prepare()
    finally:
        pool.close()


if __name__ == "__main__":
    main()
