"""A task's reference source is client text: generating candidates for it must not run it in the llm service.

Fixed by services/llm/isolation.py: the heuristic generator answers from a sandboxed worker per task.

Found by the fuzz benches (bench/results/fuzz_grpc_first.json, fuzz_bus_first.json): the heuristic
generator traces the reference with torch.fx in the llm service's own process (tasks.reference.
load_reference_module: exec), so a reference that writes a file, reads a secret or kills a process does
so with the service's rights. Task validation at submission runs the same source in a sandbox, but a
reference can pass there (its write refused, os.system's exit status ignored) and act here.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from kernelfoundry.bus.consumer import Delivery, Reject
from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.services.llm.handlers import GenerateHandler
from kernelfoundry.services.llm.isolation import GeneratorPool
from kernelfoundry.v1 import search_pb2

HOSTILE = """import os
import torch
import torch.nn as nn
open({proof!r}, "w").write("ran in the llm service")
class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)
def get_inputs():
    return [torch.randn(8, 8)]
def get_init_inputs():
    return []
"""


def test_generating_for_a_hostile_reference_does_not_run_it_in_the_service(tmp_path: Path) -> None:
    proof = tmp_path / "proof"
    request = search_pb2.GenerateCandidates(
        request_id="r1", run_id="run-000000000001", backend="cpu", count=1
    )
    request.task.name = "hostile"
    request.task.reference_source = HOSTILE.format(proof=str(proof))
    pool = GeneratorPool("heuristic")
    handler = GenerateHandler(HeuristicGenerator(), isolation=pool)  # as services/llm/main.py wires it
    try:
        with contextlib.suppress(Reject):  # refusing the request is fine; running its reference is not
            asyncio.run(handler(request, Delivery("kf.generate.heuristic", 1, 1)))
    finally:
        pool.close()
    assert not proof.exists(), proof.read_text()
