"""The judge process: `python -m kernelfoundry.evaluation.judge [--pdeathsig] [--device D]`.

The trusted side of the sealed evaluation, the long-lived child of EvaluationWorker. Reads requests
(JSON, wire.py) from stdin and answers reports (JSON of EvaluationReport.to_dict) on the original
stdout. It never loads a unit nor executes glue: each candidate runs in a fresh runner process that the
judge spawns through the sandbox (runner_client.py); idle runners are started ahead (the backend's
`runners_ahead`), torch imported, so process start stays off the evaluation's path, and no runner
ever serves a second candidate.
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
from collections import deque

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
    """Keeps the backend's `runners_ahead` idle runners started ahead (oldest handed out first); hands
    each candidate a runner no one has used."""

    def __init__(self, device: str, ahead: int | None = None) -> None:
        self.device = device
        self.backend = backend_for_device(device)
        self.ahead = max(1, self.backend.runners_ahead if ahead is None else ahead)
        self._idle: deque[RunnerProcess] = deque()

    def prepare(self) -> None:
        """Start runners until `ahead` are idle; a failure to start waits for `take`, inside an
        evaluation, where it becomes that evaluation's worker_error instead of ending the judge.
        Runners start only here, never during a candidate's evaluation after `take` (a process the
        judge gains then would read as one the candidate left behind)."""
        self._drop_dead()
        while len(self._idle) < self.ahead:
            try:
                self._idle.append(RunnerProcess(self.backend, self.device))
            except Exception:
                return

    def take(self) -> RunnerProcess:
        """A runner for the candidate now arriving, the one started longest ago; the replacements
        start at once, while this candidate's trials run, so that no candidate waits for a start."""
        self._drop_dead()
        runner = self._idle.popleft() if self._idle else RunnerProcess(self.backend, self.device)
        self.prepare()
        return runner

    def settle(self) -> None:
        """Before a candidate is timed: where a start must not compete with timed calls (the CPU,
        whose cores a kernel's time is), wait until every runner started ahead has started (torch
        imported, device initialised). A runner that fails to start is dropped; `take` starts
        another."""
        if self.backend.start_runners_beside_timing:
            return
        for runner in list(self._idle):
            try:
                runner.wait_ready()
            except Exception:
                runner.close()
                self._idle.remove(runner)

    @property
    def idle(self) -> tuple[RunnerProcess, ...]:
        return tuple(self._idle)

    def close(self) -> None:
        while self._idle:
            self._idle.popleft().close()

    def _drop_dead(self) -> None:
        for runner in [r for r in self._idle if not r.alive()]:
            runner.close()
            self._idle.remove(runner)


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
    from kernelfoundry.evaluation.trial_cache import TrialCache

    if backend_for_device(device).memory == "staged":
        torch.cuda.init()
    trials = TrialCache()  # the tasks' trial seeds and references, across this judge's evaluations
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
            report, broken = run_evaluation(request, pool.take, before_timing=pool.settle, trial_cache=trials)
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
