"""End to end: a real JetStream server and the five services as separate processes, driven through gRPC."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import nats
import pytest

from kernelfoundry.bus import subjects
from kernelfoundry.client import KernelFoundryClient, SubmissionRejected
from kernelfoundry.domain.speedup import RETIME_MARKER
from kernelfoundry.lineage.connection import open_repository
from kernelfoundry.stack.hardware import cpu_target
from kernelfoundry.stack.supervisor import Stack
from kernelfoundry.tasks.loading import load_task, load_task_from_source
from kernelfoundry.tasks.model import ShapeVariant, Task
from kernelfoundry.v1 import run_pb2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]

# Small shapes and few timed runs keep each evaluation around a second on two cores.
FAST_ENV = {
    "KF_TIMED_RUNS": "10",
    "KF_CORRECTNESS_TRIALS": "5",
    "KF_LOG_FORMAT": "json",
    "KF_ACK_WAIT_S": "6",
    "KF_HEARTBEAT_S": "2",
}


def small(task: Task, **overrides: int) -> Task:
    from dataclasses import replace

    return replace(task, shapes=(ShapeVariant("small", overrides),))


def chain_task() -> Task:
    return small(load_task(ROOT / "tasks" / "level2_elementwise_chain.py"), batch_size=256, dim=4096)


def relu_task() -> Task:
    return small(load_task(ROOT / "tasks" / "level1_relu.py"), batch_size=128, dim=4096)


def config(iterations: int = 2, population: int = 2) -> run_pb2.RunConfig:
    return run_pb2.RunConfig(
        hardware=cpu_target().execute, iterations=iterations, population=population, sweeps=False, seed=1
    )


def wait_finished(client: KernelFoundryClient, run_id: str, timeout_s: float = 300) -> run_pb2.RunProgress:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        progress = client.get_run(run_id)
        if progress.status != run_pb2.RUN_STATUS_RUNNING:
            return progress
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} did not finish in {timeout_s}s: {client.get_run(run_id)}")


def lineage(stack: Stack, run_id: str):  # type: ignore[no-untyped-def]
    """(candidates, evaluations, builds, run record) of a run, read from the store's SQLite file."""

    async def read():  # type: ignore[no-untyped-def]
        repo = await open_repository(f"sqlite:///{stack.state_dir / 'lineage.db'}")
        try:
            return (
                await repo.candidates_of_run(run_id),
                await repo.evaluations_of_run(run_id),
                await repo.builds_of_run(run_id),
                await repo.get_run(run_id),
                await repo.list_runs(limit=None),
            )
        finally:
            await repo.close()

    return asyncio.run(read())


def store_caught_up(stack: Stack) -> bool:
    """True when the store's durable consumer has acknowledged every event in the history."""

    async def probe() -> bool:
        nc = await nats.connect(stack.nats_url, connect_timeout=2, max_reconnect_attempts=0)
        try:
            js = nc.jetstream(timeout=5)
            info = await js.consumer_info(subjects.EVENTS_STREAM, "store")
            stream = await js.stream_info(subjects.EVENTS_STREAM)
            return (
                info.num_pending == 0
                and info.num_ack_pending == 0
                and info.ack_floor.stream_seq >= stream.state.last_seq
            )
        finally:
            await nc.close()

    try:
        return asyncio.run(probe())
    except Exception:  # the store has not bound its consumer yet
        return False


def wait_lineage_complete(stack: Stack, run_id: str, timeout_s: float = 60):  # type: ignore[no-untyped-def]
    """The lineage of a finished run, read once the store has acknowledged the whole event history.

    The store consumes asynchronously and each table is read by its own statement, so polling the
    tables until they look complete can stop early (candidates read before the last one was written,
    the run read after its end). Order here: the run is final, then the store has caught up with every
    event published so far (the run's end included), then one read.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        run = lineage(stack, run_id)[3]
        if run is not None and run.status != "running" and store_caught_up(stack):
            return lineage(stack, run_id)
        if time.monotonic() > deadline:
            raise AssertionError(f"lineage of {run_id} incomplete: run {run.status if run else 'missing'}")
        time.sleep(0.5)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    stack = Stack(state_dir=tmp_path_factory.mktemp("stack"), hardware=[cpu_target()], extra_env=FAST_ENV)
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()


@pytest.fixture(scope="module")
def client(stack: Stack) -> Iterator[KernelFoundryClient]:
    client = KernelFoundryClient(stack.grpc_address)
    yield client
    client.close()


def test_a_run_completes_through_the_five_services_with_a_correct_kernel(
    stack: Stack, client: KernelFoundryClient
) -> None:
    run_id = client.submit(chain_task(), config(iterations=2))
    updates = list(client.progress(run_id))
    final = updates[-1]
    assert final.status == run_pb2.RUN_STATUS_COMPLETED, final.message
    assert final.candidates_correct >= 1
    # a speedup measured, not asserted above 1: on two shared cores the fused kernel's lead over eager
    # is noise-sized at times (0.92x in CI at 37f9028); speed is the benchmarks' to show (bench/)
    assert final.best_speedup > 0.0
    best = client.best_kernel(run_id)
    assert best.candidate_id and Path(best.path).exists()
    assert best.baseline_ms > 0 and best.runtime_ms > 0
    candidates, evaluations, _, run, _ = wait_lineage_complete(stack, run_id)
    assert run.status == "finished"
    assert {e.candidate_id for e in evaluations} <= {c.candidate_id for c in candidates}
    assert len(evaluations) == len({e.candidate_id for e in evaluations})


def test_two_runs_at_once_both_complete_and_their_records_do_not_mix(
    stack: Stack, client: KernelFoundryClient
) -> None:
    first = client.submit(chain_task(), config(iterations=1))
    second = client.submit(relu_task(), config(iterations=1))
    assert first != second
    for run_id, task_name in ((first, "level2_elementwise_chain"), (second, "level1_relu")):
        final = wait_finished(client, run_id)
        assert final.status == run_pb2.RUN_STATUS_COMPLETED
        assert final.task_name == task_name
        candidates, evaluations, _, run, _ = wait_lineage_complete(stack, run_id)
        assert run.task_name == task_name
        assert all(c.run_id == run_id and c.candidate_id.startswith(run_id) for c in candidates)
        assert all(e.run_id == run_id and e.candidate_id.startswith(run_id) for e in evaluations)


BAD_TASKS = {
    "does_not_import": ("import torch\nclass Model(:\n", "import_error"),
    "lacks_model": ("import torch\ndef get_inputs():\n    return [torch.randn(4)]\n", "missing_model"),
    "lacks_get_inputs": (
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x * 2\n",
        "missing_get_inputs",
    ),
    "reference_raises": (
        "import torch\nclass Model(torch.nn.Module):\n"
        "    def forward(self, x):\n        raise RuntimeError('reference is broken')\n"
        "def get_inputs():\n    return [torch.randn(8)]\ndef get_init_inputs():\n    return []\n",
        "reference_error",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_TASKS))
def test_a_bad_task_is_rejected_at_submission_and_nothing_is_created(
    stack: Stack, client: KernelFoundryClient, case: str
) -> None:
    source, reason = BAD_TASKS[case]
    _, _, _, _, runs_before = lineage(stack, "none")
    task = Task(name=f"bad_{case}", reference_source=source)
    with pytest.raises(SubmissionRejected) as rejected:
        client.submit(task, config(iterations=1))
    assert reason in str(rejected.value)
    time.sleep(1.0)  # anything wrongly created would have reached the store by now
    _, _, _, _, runs_after = lineage(stack, "none")
    assert len(runs_after) == len(runs_before)
    assert not any(r.task_name == f"bad_{case}" for r in runs_after)


def test_task_text_loads_like_a_file() -> None:
    source = (ROOT / "tasks" / "level1_relu.py").read_text()
    assert load_task_from_source(source, "relu").reference_source == source


def _executor_log(stack: Stack) -> Path:
    return stack.service("executor").log_path


def test_killing_the_executor_mid_evaluation_loses_and_repeats_nothing(tmp_path: Path) -> None:
    stack = Stack(state_dir=tmp_path / "stack", hardware=[cpu_target()], extra_env=FAST_ENV)
    stack.start()
    client = KernelFoundryClient(stack.grpc_address)
    try:
        run_id = client.submit(chain_task(), config(iterations=2))
        executor = stack.service("executor")
        log_path = executor.log_path
        deadline = time.monotonic() + 180
        while "evaluation started" not in log_path.read_text(errors="replace"):
            assert time.monotonic() < deadline, "the executor never started an evaluation"
            time.sleep(0.05)
        executor.kill()
        assert not executor.alive()
        time.sleep(1.0)
        executor.start()
        final = wait_finished(client, run_id)
        assert final.status == run_pb2.RUN_STATUS_COMPLETED, final.message
        candidates, evaluations, builds, _, _ = wait_lineage_complete(stack, run_id)
        evaluated = [e.candidate_id for e in evaluations]
        assert len(evaluated) == len(set(evaluated)), "a candidate was evaluated twice in the lineage"
        failed_builds = {b.candidate_id for b in builds if not b.ok}
        missing = [c.candidate_id for c in candidates if c.candidate_id not in set(evaluated) | failed_builds]
        assert not missing, f"candidates lost: {missing}"
        # the best kernel's re-time is recorded as a candidate, but the run's counters count search candidates
        searched = [c for c in candidates if RETIME_MARKER not in c.candidate_id]
        assert final.candidates_correct + final.candidates_failed == len(searched)
    finally:
        client.close()
        stack.stop()
