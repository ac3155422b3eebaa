"""A GPU's evaluations and the task validations beside them take turns on one host (its memory), with
bounded waits; CPUs and an empty folder take no lease."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from kernelfoundry.stack.device_lease import DeviceLease, physical_gpu
from kernelfoundry.stack.supervisor import Stack


def _gate_taken(folder: Path, timeout_s: float = 5.0) -> bool:
    """Whether someone holds the GPU lock's gate within `timeout_s` (a writer waiting or holding)."""
    gate = folder / "gpu-0" / "gate.lock"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if gate.exists():
            fd = os.open(gate, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            finally:
                os.close(fd)
        time.sleep(0.01)
    return False


def _start(fn: Callable[[], object]) -> threading.Thread:
    t = threading.Thread(target=fn, daemon=True)
    t.start()
    return t


@pytest.mark.parametrize(
    ("device", "environ", "gpu"),
    [
        ("cpu", {}, None),
        ("cuda", {}, "0"),
        ("cuda:1", {}, "1"),
        ("cuda:0", {"CUDA_VISIBLE_DEVICES": "3"}, "3"),  # an executor pinned to the host's GPU 3
        ("cuda:1", {"CUDA_VISIBLE_DEVICES": "2, 5"}, "5"),
        ("cuda:0", {"CUDA_VISIBLE_DEVICES": "GPU-8f2a"}, "GPU-8f2a"),
        ("cuda:2", {"CUDA_VISIBLE_DEVICES": "0,1"}, None),  # past the visible devices
        ("cuda:0", {"CUDA_VISIBLE_DEVICES": ""}, None),  # none visible
        ("cuda:x", {}, None),
    ],
)
def test_a_device_is_named_by_the_gpu_its_process_sees(device: str, environ: dict, gpu: str | None) -> None:
    assert physical_gpu(device, environ) == gpu


def test_evaluations_on_one_gpu_run_side_by_side(tmp_path: Path) -> None:
    lease = DeviceLease(tmp_path, environ={})
    inside = threading.Barrier(2, timeout=5)
    taken: list[bool | None] = []

    def evaluate() -> None:
        with lease.evaluating("cuda:0") as held:
            taken.append(held)
            inside.wait()  # both hold the GPU at once, or this times out

    for t in [_start(evaluate) for _ in range(2)]:
        t.join(5)
    assert not inside.broken and taken == [True, True]


def test_a_validation_waits_for_the_evaluation_in_flight_and_holds_new_ones_back(tmp_path: Path) -> None:
    lease = DeviceLease(tmp_path, environ={})
    events: list[str] = []
    started, release = threading.Event(), threading.Event()

    def first() -> None:
        with lease.evaluating("cuda:0"):
            events.append("evaluation 1 start")
            started.set()
            release.wait(5)
            events.append("evaluation 1 end")

    def validate() -> None:
        with lease.validating("cuda:0") as held:
            assert held is True
            events.append("validation start")
            time.sleep(0.1)
            events.append("validation end")

    def second() -> None:
        with lease.evaluating("cuda:0"):
            events.append("evaluation 2 start")

    a = _start(first)
    assert started.wait(5)
    b = _start(validate)
    assert _gate_taken(tmp_path)  # the validation holds the gate and waits for evaluation 1
    c = _start(second)
    time.sleep(0.3)  # evaluation 2 waits at the gate
    assert events == ["evaluation 1 start"]
    release.set()
    for t in (a, b, c):
        t.join(5)
    assert events == [
        "evaluation 1 start",
        "evaluation 1 end",
        "validation start",
        "validation end",
        "evaluation 2 start",
    ]


def test_a_wait_past_its_bound_goes_on_without_the_lease_and_leaves_nothing_locked(tmp_path: Path) -> None:
    lease = DeviceLease(tmp_path, environ={})
    held, release = threading.Event(), threading.Event()

    def long_evaluation() -> None:
        with lease.evaluating("cuda"):
            held.set()
            release.wait(5)

    a = _start(long_evaluation)
    assert held.wait(5)
    began = time.monotonic()
    with lease.validating("cuda", wait_s=0.2) as taken:
        assert taken is False
    assert time.monotonic() - began < 2.0
    with lease.evaluating("cuda", wait_s=0.5) as taken:  # the gate was let go: evaluations go on
        assert taken is True
    release.set()
    a.join(5)


def test_other_gpus_cpus_and_an_empty_folder_take_no_turns(tmp_path: Path) -> None:
    lease = DeviceLease(tmp_path, environ={})
    with lease.evaluating("cuda:0") as first:
        assert first is True
        with lease.validating("cuda:1", wait_s=0.5) as other:
            assert other is True  # another GPU's lock
        with lease.validating("cpu") as cpu:
            assert cpu is None
    with DeviceLease("").evaluating("cuda:0") as off, DeviceLease(None).validating("cuda:0") as none:
        assert off is None and none is None


def test_a_folder_that_cannot_be_made_leaves_the_work_unleased(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with DeviceLease(blocker / "locks", environ={}).validating("cuda:0") as taken:
        assert taken is None


def test_a_validation_in_another_process_holds_the_gpu_until_it_ends(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "from kernelfoundry.stack.device_lease import DeviceLease\n"
         f"import time\nwith DeviceLease({str(tmp_path)!r}, environ={{}}).validating('cuda:0'):\n"
         "    print('held', flush=True)\n    time.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    lease = DeviceLease(tmp_path, environ={})
    with lease.evaluating("cuda:0", wait_s=0.3) as taken:
        assert taken is False  # the other process holds it
    holder.kill()  # a process that dies holding the lease releases it
    holder.wait(5)
    with lease.evaluating("cuda:0", wait_s=5) as taken:
        assert taken is True


def test_the_embedded_stack_gives_its_services_one_lease_folder(tmp_path: Path) -> None:
    env = Stack(state_dir=tmp_path)._base_env()
    assert env["KF_DEVICE_LOCK_DIR"] == str(tmp_path / "device-locks")


def test_a_gpu_validation_starts_its_child_only_once_the_evaluation_in_flight_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelfoundry.tasks import validation
    from kernelfoundry.tasks.model import Task

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    moments: dict[str, float] = {}
    started, release = threading.Event(), threading.Event()

    def child(task: Task, timeout_s: float, memory_limit_bytes: int, device: str) -> object:
        moments["child"] = time.monotonic()
        return object()

    monkeypatch.setattr(validation, "_validate_in_child", child)

    def evaluation() -> None:
        with DeviceLease(tmp_path).evaluating("cuda:0"):
            started.set()
            release.wait(5)
            moments["evaluation end"] = time.monotonic()

    a = _start(evaluation)
    assert started.wait(5)
    threading.Timer(0.3, release.set).start()
    task = Task(name="t", reference_source="import torch\nclass Model(torch.nn.Module):\n    pass\n")
    validation.validate_task(task, device="cuda", device_lock_dir=tmp_path)
    a.join(5)
    assert moments["child"] >= moments["evaluation end"]
    validation.validate_task(task, device="cpu", device_lock_dir=tmp_path)  # a CPU takes no turn
