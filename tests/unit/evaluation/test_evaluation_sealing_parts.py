"""Shared memory, the request's JSON form, the backend registry and /proc observations."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from kernelfoundry.domain.kernel import KernelSource, Tunable
from kernelfoundry.evaluation import EvaluationRequest, EvaluationSettings, observation
from kernelfoundry.evaluation.backends import BACKENDS, backend_for_device, backend_named
from kernelfoundry.evaluation.shared_memory import Arena, layout
from kernelfoundry.evaluation.wire import request_from_dict, request_to_dict
from kernelfoundry.tasks.model import ShapeVariant, Task, Tolerance


def test_arena_tensors_share_memory_across_mappings() -> None:
    specs, size = layout([("float32", (3, 4)), ("int64", (5,)), ("float32", (0,))])
    assert all(s.offset % 64 == 0 for s in specs)
    arena = Arena.create(size)
    other = Arena(arena.fd, size, writable=False)
    arena.tensor(specs[0]).copy_(torch.arange(12.0).reshape(3, 4))
    assert other.tensor(specs[0]).sum().item() == 66.0
    assert other.tensor(specs[2]).numel() == 0
    with pytest.raises(ValueError):
        arena.tensor(type(specs[0])("float32", (10**9,), 0))


def test_a_write_to_a_read_only_mapping_faults_in_the_writer() -> None:
    specs, size = layout([("float32", (16,))])
    arena = Arena.create(size)
    os.set_inheritable(arena.fd, True)
    script = textwrap.dedent(
        f"""
        from kernelfoundry.evaluation.shared_memory import Arena, TensorSpec
        view = Arena({arena.fd}, {size}, writable=False).tensor(TensorSpec("float32", (16,), 0))
        view.fill_(1.0)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], pass_fds=(arena.fd,), capture_output=True, timeout=120
    )
    assert done.returncode < 0  # killed by SIGSEGV / SIGBUS
    assert arena.tensor(specs[0]).sum().item() == 0.0


@pytest.mark.parametrize("past", [0, 1, 4096 // 4])
def test_a_write_past_a_guarded_arena_faults_whatever_is_mapped_beyond(past: int) -> None:
    """The runner's output arena (`guarded`): a page of 4096 bytes of outputs, then a PROT_NONE page of
    its own, so the first float past the last page faults (the writer dies by a signal) even where the
    address space after the mapping would have been writable; writes inside it reach the judge's
    mapping."""
    specs, size = layout([("float32", (1024,))])
    arena = Arena.create(size)
    os.set_inheritable(arena.fd, True)
    script = textwrap.dedent(
        f"""
        import ctypes, mmap
        from kernelfoundry.evaluation.shared_memory import Arena, TensorSpec
        out = Arena({arena.fd}, {size}, writable=True, guarded=True)
        view = out.tensor(TensorSpec("float32", (1024,), 0))
        view.fill_(2.0)
        # a writable anonymous mapping asked for right after the arena: refused the guard's place
        at = view.data_ptr() + 4096
        libc = ctypes.CDLL(None)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                              ctypes.c_long]
        got = libc.mmap(at, 4096, 3, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        assert got != at, "the guard page was free for another mapping"
        if {past}:
            ctypes.c_float.from_address(view.data_ptr() + 4 * (1024 + {past} - 1)).value = 1.0
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], pass_fds=(arena.fd,), capture_output=True, timeout=120
    )
    if past:
        assert done.returncode < 0, done.stderr.decode()[-2000:]  # killed by SIGSEGV
    else:
        assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert arena.tensor(specs[0]).sum().item() == 2048.0  # the writes before the fault landed


def test_a_guarded_arena_is_unmapped_when_its_last_view_goes() -> None:
    specs, size = layout([("float32", (8,))])
    arena = Arena.create(size)
    out = Arena(os.dup(arena.fd), size, writable=True, guarded=True)
    view = out.tensor(specs[0])
    out.close()  # its descriptor closed, the mapping kept by its view
    view.fill_(3.0)
    assert arena.tensor(specs[0]).sum().item() == 24.0
    with pytest.raises(ValueError, match="writable"):
        Arena(arena.fd, size, writable=False, guarded=True)


def test_request_round_trips_through_json() -> None:
    request = EvaluationRequest(
        Task("t", "src", shapes=(ShapeVariant("a", {"N": 4}),), tolerance=Tolerance(1e-3, 1e-3), seeds=3),
        KernelSource("cpp", "code", glue="g", tunables=(Tunable("B", (64, 128), 64),), params={"B": 128}),
        Path("/tmp/unit.so"),
        "cpu",
        EvaluationSettings(timed_runs=7, tolerance=Tolerance(1e-5, 1e-5), cpu_threads=2),
    )
    import json

    assert request_from_dict(json.loads(json.dumps(request_to_dict(request)))) == request


def test_backends_are_one_table() -> None:
    assert backend_for_device("cuda:1") is BACKENDS["cuda"]
    assert backend_for_device("cpu").memory == "shared"
    assert backend_named("cuda").memory == "staged"
    with pytest.raises(ValueError, match="known"):
        backend_named("sycl")
    with pytest.raises(ValueError):
        backend_for_device("xpu:0")
    assert EvaluationSettings().runs_for("cuda") == BACKENDS["cuda"].default_timed_runs


def test_observation_sees_children_and_cpu_time() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert child.pid in observation.children(os.getpid())
    finally:
        child.kill()
        child.wait()
    spent = observation.cpu_time_ns(os.getpid())
    total = sum(i * i for i in range(200_000))  # burn some CPU in this process
    assert total > 0 and observation.cpu_time_ns(os.getpid()) > spent
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert observation.cpu_time_ns(gone.pid) == 0  # reaped: nothing left to read


def test_a_sealed_arena_is_written_only_through_the_judges_own_mapping() -> None:
    import ctypes
    import mmap

    specs, size = layout([("float32", (4096,))])
    arena = Arena.create(size)
    arena.seal()
    assert arena.sealed()
    arena.tensor(specs[0]).fill_(2.0)  # the judge's fresh values still go in
    with pytest.raises(OSError):
        os.pwrite(arena.fd, b"\0" * 4, 0)
    with pytest.raises(OSError):
        mmap.mmap(arena.fd, size, access=mmap.ACCESS_WRITE)
    reader = Arena(arena.fd, size, writable=False)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    page = os.sysconf("SC_PAGE_SIZE")
    start = reader.address() // page * page
    assert libc.mprotect(start, page, mmap.PROT_READ | mmap.PROT_WRITE) != 0  # no way to make it writable
    with pytest.raises(OSError):
        os.ftruncate(arena.fd, size * 2)
    assert reader.tensor(specs[0]).sum().item() == 2.0 * 4096
    unsealed = Arena.create(size)
    assert not unsealed.sealed()


def test_the_scheduler_figures_of_a_process_and_of_everything_else() -> None:
    import threading

    mine = observation.thread_schedule_ns(os.getpid())
    assert threading.get_native_id() in mine
    cpu, waited = mine[threading.get_native_id()]
    assert cpu > 0 and waited >= 0
    others = observation.other_tasks_cpu_ns(frozenset({os.getpid()}))
    assert others and threading.get_native_id() not in others
    assert observation.cpu_used_between({1: 5, 2: 9}, {1: 8, 3: 4}) == 3 + 4  # a new thread counts from 0
    assert observation.thread_schedule_ns(2**22 + 12345) == {}


GUARDED_WRITER = """
import ctypes, socket, sys
from kernelfoundry.evaluation.runner import ReadOnlyGuard
from kernelfoundry.evaluation.shared_memory import Arena, TensorSpec
arena = Arena({fd}, {size}, writable=False)
guard = ReadOnlyGuard()
guard.sock = socket.socket(fileno={sock})
guard.nonce = "ab" * 16
guard.watch(arena.address(), arena.size, "input set 1 of shape 0")
guard.install()
if sys.argv[1] == "input":
    ctypes.memset(arena.address() + 64, 0, 4)  # native code writing an input
else:
    ctypes.memset(8, 0, 4)  # a wild write anywhere else
"""


@pytest.mark.parametrize("target", ["input", "elsewhere"])
def test_a_write_into_an_input_is_reported_and_any_other_fault_still_kills(target: str) -> None:
    from kernelfoundry.evaluation import channel

    _, size = layout([("float32", (1024,))])
    arena = Arena.create(size)
    arena.seal()
    judge_end, runner_end = channel.channel_pair()
    script = GUARDED_WRITER.format(fd=arena.fd, size=size, sock=runner_end.fileno())
    os.set_inheritable(arena.fd, True)
    done = subprocess.run(
        [sys.executable, "-c", script, target],
        pass_fds=(arena.fd, runner_end.fileno()),
        capture_output=True,
        timeout=120,
    )
    runner_end.close()
    if target == "input":
        reply = channel.receive(judge_end, None)
        assert reply["kind"] == "failed" and reply["reason"] == "input_modified"
        assert reply["nonce"] == "ab" * 16 and "input set 1 of shape 0" in reply["message"]
        assert done.returncode == 3
    else:
        assert done.returncode < 0, done.stderr  # the signal's default action, as without the guard
        with pytest.raises(channel.ChannelClosed):
            channel.receive(judge_end, None)
