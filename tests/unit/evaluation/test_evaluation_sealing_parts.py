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
