"""The llm service's sandboxed generator workers: candidates come back, failures cost one request only."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelfoundry.bus.consumer import Delivery
from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.services.llm.handlers import GenerateHandler
from kernelfoundry.services.llm.isolation import GeneratorPool
from kernelfoundry.v1 import search_pb2

RELU = """import torch
import torch.nn as nn
class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)
def get_inputs():
    return [torch.randn(16, 64)]
def get_init_inputs():
    return []
"""
DIES = RELU.replace("return torch.relu(x)", "import os; os._exit(3)")
SPEAKS = "import os\nos.write(1, b'\\xff' * 64)\nprint('hello from the task')\n" + RELU


def request(source: str, request_id: str = "r1", name: str = "relu") -> search_pb2.GenerateCandidates:
    message = search_pb2.GenerateCandidates(
        request_id=request_id, run_id="run-000000000001", backend="cpu", count=2
    )
    message.task.name = name
    message.task.reference_source = source
    return message


@pytest.fixture
def pool() -> Iterator[GeneratorPool]:
    made = GeneratorPool("heuristic", max_workers=2, timeout_s=120.0)
    yield made
    made.close()


def ask(pool: GeneratorPool, message: search_pb2.GenerateCandidates) -> search_pb2.CandidatesGenerated:
    handler = GenerateHandler(HeuristicGenerator(), isolation=pool)
    (outgoing,) = asyncio.run(handler(message, Delivery("kf.generate.heuristic", 1, 1)))
    return outgoing.message  # type: ignore[no-any-return]


def test_candidates_come_back_from_the_worker_with_the_services_name(pool: GeneratorPool) -> None:
    event = ask(pool, request(RELU))
    assert event.request_id == "r1" and event.generator == "heuristic"
    assert event.candidates and not event.error_reason
    assert all("kf_abi.h" in c.source.code for c in event.candidates)


def test_output_of_the_tasks_code_cannot_break_the_framing(pool: GeneratorPool) -> None:
    event = ask(pool, request(SPEAKS))
    assert event.candidates and not event.error_reason


def test_a_worker_that_dies_fails_its_request_only(pool: GeneratorPool) -> None:
    failed = ask(pool, request(DIES, "r-dies", "dies"))
    assert failed.error_reason == "generator_error"
    assert "sandboxed worker failed" in failed.error_message
    assert ask(pool, request(RELU, "r-after")).candidates  # the service goes on


def test_one_worker_per_task_source_and_no_more_than_the_bound(pool: GeneratorPool) -> None:
    for i in range(3):
        source = RELU.replace("16, 64", f"16, {64 * (i + 1)}")
        assert ask(pool, request(source, f"r{i}")).candidates
    assert len(pool._workers) == 2


def test_the_worker_cannot_write_outside_its_scratch(pool: GeneratorPool, tmp_path: Path) -> None:
    proof = tmp_path / "proof"
    hostile = f"open({str(proof)!r}, 'w').write('x')\n" + RELU
    ask(pool, request(hostile, "r-hostile"))
    assert not proof.exists()
