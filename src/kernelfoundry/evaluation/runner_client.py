"""The judge's handle on one runner process: spawning it sealed, commanding it, watching it.

`RunnerProcess.spawn` starts `python -m kernelfoundry.evaluation.runner` through `launch_sandboxed`
(kernelfoundry.sandbox when installed: scrubbed environment, no network, scratch-only writes, limits,
its process group killed at the end; otherwise a plain subprocess in its own session with the same
environment allow-list) with one end of the channel, in a fresh scratch folder deleted afterwards.
`request` sends a command with a fresh nonce and returns the validated reply and the judge's own wall
time of the round trip. Around every exchange it observes, from /proc, the CPU time the runner burnt
while idle and any process the runner (or a daemon reparented to the judge) started. Every failure is
an EvaluationFailure with its reason: timeout, crash (naming the signal), runner_protocol_violation,
background_work, background_process, or the reason of a `failed` reply.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import kernelfoundry
from kernelfoundry.evaluation import channel, messages, observation, reasons, verification
from kernelfoundry.evaluation.backends import Backend
from kernelfoundry.evaluation.reasons import EvaluationFailure
from kernelfoundry.stack.hardware import physical_memory_bytes

STARTUP_TIMEOUT_S = 180.0
LOG_TAIL_BYTES = 2000
ENV_ALLOW = (
    "PATH",
    "LANG",
    "LC_ALL",
    "LD_LIBRARY_PATH",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_HOME",
    "OMP_NUM_THREADS",
    "OMP_WAIT_POLICY",
    "OMP_PROC_BIND",
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
)
MAX_OPEN_FILES = 4096
# The runner's memory limit (RLIMIT_AS on the CPU, RLIMIT_DATA with a GPU, where CUDA reserves far more
# address space than it uses): a runner is started before its candidate is known, so the limit is the
# host's, not the task's. KF_RUNNER_MEMORY_BYTES overrides the default share of physical memory.
RUNNER_MEMORY_ENV = "KF_RUNNER_MEMORY_BYTES"
RUNNER_MEMORY_SHARE = 0.75
MIN_RUNNER_MEMORY_BYTES = 4 << 30
# The idle window after a watched reply lasts at least this long before the next command, so that work a
# unit left running has time to show up as CPU time however quickly the judge moves on (without it the
# window could be a fraction of a millisecond, and detection depended on the judge's own speed).
MIN_IDLE_WINDOW_S = 0.003
# A window over its allowance is measured again, this long, right away (no command in between), before
# the judge convicts (verification.py, "Background work"): work left running shows there again, an
# honest thread's wake-up after the reply, stretched by a busy host, is over by then.
IDLE_RECHECK_WINDOW_S = 0.05


class _PlainProcess:
    """The stand-in for kernelfoundry.sandbox's process when that package is absent."""

    def __init__(
        self, argv: list[str], scratch: Path, env: dict[str, str], pass_fds: tuple[int, ...], log: Any
    ) -> None:
        self._popen = subprocess.Popen(
            argv,
            cwd=scratch,
            env=env,
            pass_fds=pass_fds,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )
        self.pid = self._popen.pid
        self.protections = ["own session", "scrubbed environment", "scratch working folder"]

    def wait(self, timeout: float | None = None) -> int:
        return self._popen.wait(timeout)

    def poll(self) -> int | None:
        return self._popen.poll()

    def kill_all(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._popen.wait(timeout=30)

    def leftovers(self) -> list[int]:
        return []


def runner_memory_bytes() -> int:
    """How much memory a runner may take: KF_RUNNER_MEMORY_BYTES, else 3/4 of physical memory."""
    configured = os.environ.get(RUNNER_MEMORY_ENV, "").strip()
    if configured:
        return max(int(configured), MIN_RUNNER_MEMORY_BYTES)
    return max(int(physical_memory_bytes() * RUNNER_MEMORY_SHARE), MIN_RUNNER_MEMORY_BYTES)


def launch_sandboxed(
    argv: list[str], scratch: Path, env: dict[str, str], pass_fds: tuple[int, ...], gpu: bool, log: Path
) -> Any:
    """Start the runner sealed; the one place that knows how (swap the sandbox here). Its stdout and
    stderr go to `log` (in its scratch folder), so that a runner that dies before it can write its own
    log (an import error) still says why in the judge's report."""
    with open(log, "ab") as output:
        return _launch(argv, scratch, env, pass_fds, gpu, output)


def _launch(
    argv: list[str], scratch: Path, env: dict[str, str], pass_fds: tuple[int, ...], gpu: bool, output: Any
) -> Any:
    try:
        from kernelfoundry.sandbox import SandboxPolicy, spawn_sandboxed  # type: ignore[import-not-found]
    except ImportError:
        return _PlainProcess(argv, scratch, env, pass_fds, output)
    policy = SandboxPolicy(
        scratch=scratch,
        env_allow=(),
        env_set=env,
        memory_bytes=runner_memory_bytes(),
        max_processes=None,
        max_open_files=MAX_OPEN_FILES,
        cpu_seconds=None,
        gpu=gpu,
    )
    return spawn_sandboxed(argv, policy, pass_fds=pass_fds, stdout=output, stderr=output)


def runner_environment(scratch: Path) -> dict[str, str]:
    """The allow-listed variables of this process, plus what the runner needs to import itself: the
    folder kernelfoundry was imported from, then this process's own PYTHONPATH folders (where the
    dependencies may live when kernelfoundry itself is imported from a source tree)."""
    env = {name: os.environ[name] for name in ENV_ALLOW if name in os.environ}
    package_root = str(Path(kernelfoundry.__file__).resolve().parents[1])
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and Path(p).is_dir()]
    search_path = list(dict.fromkeys([package_root, *inherited]))
    env.update(
        {
            "PYTHONPATH": os.pathsep.join(search_path),
            "HOME": str(scratch),
            "TMPDIR": str(scratch),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    return env


class RunnerProcess:
    """One runner: spawned before its candidate arrives, used for one candidate, then killed."""

    def __init__(self, backend: Backend, device: str, program: tuple[str, ...] = ()) -> None:
        """`program` replaces `python -m kernelfoundry.evaluation.runner` (tests plant hostile runners)."""
        self.backend = backend
        self.device = device
        self.scratch = Path(tempfile.mkdtemp(prefix="kf-runner-"))
        self.log_path = self.scratch / "runner.log"
        self._sock, runner_end = channel.channel_pair()
        self._nonce = messages.new_nonce()
        argv = [
            *(program or (sys.executable, "-m", "kernelfoundry.evaluation.runner")),
            "--fd",
            str(runner_end.fileno()),
            "--device",
            device,
            "--nonce",
            self._nonce,
            "--log",
            str(self.log_path),
            *backend.runner_flags,
        ]
        try:
            self.process = launch_sandboxed(
                argv,
                self.scratch,
                runner_environment(self.scratch),
                (runner_end.fileno(),),
                gpu=backend.memory == "staged",
                log=self.log_path,
            )
        finally:
            runner_end.close()
        self.pid: int = self.process.pid
        self.ready = False
        # (main thread, other live threads, whole process with exited threads) at the last reply
        self._cpu_at_reply: tuple[int, int, int] | None = None
        self._last_claim_ns = 0
        # the judge's own watch, seconds so far: the idle window after timed replies (its wait and its
        # reads of the runner's CPU time) and the scan for processes the runner started
        self.idle_window_s = 0.0
        self.process_watch_s = 0.0
        self._last_op = "its start"
        self._watch_idle = False  # verification.watches_idle: after timed calls (sampled) and batches
        self.watch_probability = verification.IDLE_WATCH_PROBABILITY
        self.watched_windows = 0
        self._replied_at = 0.0  # time.monotonic() of the last reply
        self._idle_suspect = False  # the last watched window was over its allowance, its re-check idle
        self.notes: list[str] = []  # for the report: suspicions that the re-check cleared
        self._judge_children_before: set[int] = set()
        self.closed = False

    # ---- lifecycle ---------------------------------------------------------------------------------
    def wait_ready(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Wait for the runner's greeting (torch imported, device initialised)."""
        if self.ready:
            return
        try:
            data = channel.receive(self._sock, time.monotonic() + timeout_s)
            messages.parse_reply(data, "ready", self._nonce)
        except (channel.ChannelClosed, channel.ChannelTimeout, channel.ChannelViolation) as exc:
            raise EvaluationFailure(
                reasons.WORKER_ERROR,
                f"the runner did not start ({type(exc).__name__}): {self.log_tail()[-500:]}",
            ) from exc
        except messages.ProtocolViolation as exc:
            raise EvaluationFailure(reasons.WORKER_ERROR, f"the runner's greeting was wrong: {exc}") from exc
        self.ready = True
        self._cpu_at_reply = self._cpu_now()

    def alive(self) -> bool:
        return not self.closed and self.process.poll() is None

    def begin_candidate(self, known_judge_children: set[int]) -> None:
        """Processes of the judge that exist now are not the candidate's."""
        self._judge_children_before = set(known_judge_children)

    def log_tail(self) -> str:
        with contextlib.suppress(OSError), open(self.log_path, "rb") as log:
            log.seek(0, os.SEEK_END)
            log.seek(max(0, log.tell() - LOG_TAIL_BYTES))
            return log.read().decode("utf-8", "replace").strip()
        return ""

    def close(self) -> list[int]:
        """Kill the runner's whole process group; the pids the sandbox saw left over."""
        if self.closed:
            return []
        self.closed = True
        with contextlib.suppress(OSError):
            self._sock.close()
        leftovers: list[int] = []
        with contextlib.suppress(Exception):
            leftovers = list(self.process.leftovers())  # before the kill: what outlived the candidate
        with contextlib.suppress(Exception):
            self.process.kill_all()
        shutil.rmtree(self.scratch, ignore_errors=True)
        return leftovers

    # ---- commands ----------------------------------------------------------------------------------
    def watch_schedule(self, calls: int) -> None:
        """The next `calls` timed calls are one schedule: their idle windows are watched at its rate."""
        self.watch_probability = verification.watch_probability(calls)

    def _observe_idle(self) -> None:
        # Only the idle time after timed work is watched: that is where work left running would be
        # missing from a claim. After `load` or `bind` a device runtime legitimately keeps starting up
        # (the CUDA runtime used 120-324 ms of CPU after `load` on the H200), and after a trial call
        # lazy module loading may still run; neither overlaps a timed call's claim.
        if self._cpu_at_reply is None or not self._watch_idle:
            return
        self.watched_windows += 1
        remaining = self._replied_at + MIN_IDLE_WINDOW_S - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)
        context = f"`{self._last_op}`"
        now = self._cpu_now()
        first = self._idle_excess(self._cpu_at_reply, now)
        if first is None:
            self._idle_suspect = False
            return
        # One window over its allowance is a suspicion; it convicts only when it reproduces
        # (verification.py, "Background work"): after the call before it as well ...
        if self._idle_suspect:
            raise EvaluationFailure(
                reasons.BACKGROUND_WORK,
                first.describe(context, also=", as it had after the call before (two windows in a row)"),
            )
        # ... or in a second, longer window measured at once: work left running shows there again.
        time.sleep(IDLE_RECHECK_WINDOW_S)
        again = self._idle_excess(now, self._cpu_now())
        if again is not None:
            when = (
                f"in a second window of {IDLE_RECHECK_WINDOW_S * 1e3:.0f} ms measured at once (after "
                f"{first.spent_ns / 1e6:.3f} ms in the first) "
            )
            raise EvaluationFailure(reasons.BACKGROUND_WORK, again.describe(context, when=when))
        self._idle_suspect = True
        self.notes.append(
            f"background-work check: the runner ({first.whose}) used {first.spent_ns / 1e6:.3f} ms of CPU "
            f"after replying to {context} (allowed {first.allowed_ns / 1e6:.3f} ms); measured again at once "
            f"for {IDLE_RECHECK_WINDOW_S * 1e3:.0f} ms it was idle, so that one window is not held against "
            "the candidate (a window over its allowance after its next call would be)"
        )

    def _idle_excess(
        self, then: tuple[int, int, int], now: tuple[int, int, int]
    ) -> verification.IdleExcess | None:
        main_now, others_now, total_now = now
        main_then, others_then, total_then = then
        main, others = main_now - main_then, others_now - others_then
        # a thread that ran and exited inside the window is gone from /proc/<pid>/task: its time shows
        # only in the whole process's coarse figure (two ticks of slack for the rounding of both reads)
        exited = (total_now - total_then) - (main + others) - 2 * observation.TICK_NS
        return verification.idle_excess(max(others, others + exited), self._last_claim_ns, main)

    def _cpu_now(self) -> tuple[int, int, int]:
        main, others = observation.cpu_time_split_ns(self.pid)
        return main, others, observation.process_cpu_ns(self.pid)

    def _observe_processes(self) -> None:
        judge = os.getpid()
        found = observation.children_of((self.pid, judge))
        spawned = found[self.pid]
        if spawned:
            raise EvaluationFailure(
                reasons.BACKGROUND_PROCESS,
                f"the runner has {len(spawned)} child process(es) (pids {sorted(spawned)[:5]}): "
                "a candidate may not start processes",
            )
        adopted = found[judge] - self._judge_children_before - {self.pid}
        if adopted:
            raise EvaluationFailure(
                reasons.BACKGROUND_PROCESS,
                f"{len(adopted)} process(es) that the runner started outlived their parent and were "
                f"reparented to the judge (pids {sorted(adopted)[:5]})",
            )

    def _dead(self, during: str) -> EvaluationFailure:
        try:
            code: int | None = self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        tail = self.log_tail()
        if code is None:
            self.close()
            return EvaluationFailure(
                reasons.RUNNER_PROTOCOL_VIOLATION,
                f"the runner closed its channel during {during} while alive",
            )
        message = f"the runner died with {reasons.signal_name(code)} during {during}"
        if tail:
            message += f"; its last output: {tail[-500:]}"
        self.close()
        return EvaluationFailure(reasons.CRASH, message)

    def request(
        self, op: str, expected: str, deadline: float, fds: tuple[int, ...] = (), **fields: Any
    ) -> tuple[Any, int]:
        """Send one command and return (validated reply, judge wall time of the round trip in ns)."""
        if self.closed:
            raise EvaluationFailure(reasons.WORKER_ERROR, f"command `{op}` sent to a closed runner")
        watched = time.perf_counter()
        self._observe_idle()
        self.idle_window_s += time.perf_counter() - watched
        nonce = messages.new_nonce()
        during = f"`{op}`"
        started = time.perf_counter_ns()
        try:
            channel.send(self._sock, messages.command(op, nonce, **fields), fds)
            data = channel.receive(self._sock, deadline)
            wall = time.perf_counter_ns() - started
            watch = verification.watches_idle(
                op, bool(fields.get("trial", False)), self._idle_suspect, self.watch_probability
            )
            self._cpu_at_reply = self._cpu_now() if watch else None
            self._replied_at = time.monotonic()
            reply = messages.parse_reply(data, expected, nonce)
            if channel.pending(self._sock):
                raise channel.ChannelViolation("a second message followed the reply")
        except channel.ChannelTimeout:
            self.close()
            raise EvaluationFailure(
                reasons.TIMEOUT, f"the runner did not answer {during} before the deadline; it was killed"
            ) from None
        except channel.ChannelClosed:
            raise self._dead(during) from None
        except (channel.ChannelViolation, messages.ProtocolViolation) as exc:
            self.close()
            raise EvaluationFailure(reasons.RUNNER_PROTOCOL_VIOLATION, f"after {during}: {exc}") from None
        self._last_op = op
        self._last_claim_ns = int(getattr(reply, "claimed_ns", 0))
        self._watch_idle = watch
        if isinstance(reply, messages.Failed):
            self.close()
            raise EvaluationFailure(reply.reason, reply.message)
        watched = time.perf_counter()
        self._observe_processes()
        self.process_watch_s += time.perf_counter() - watched
        return reply, wall

    def socket(self) -> socket.socket:
        return self._sock
