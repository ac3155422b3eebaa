"""The evolver takes a candidate's result only from the executor pool its run was sent to."""

from __future__ import annotations

from pathlib import Path

from kernelfoundry.bus import subjects
from kernelfoundry.bus.consumer import Delivery
from kernelfoundry.services.evolver.handlers import EventHandler
from kernelfoundry.v1 import build_pb2

from .test_evolver_runs import evaluated, generated, kernel, requests, start


async def test_a_result_from_another_pool_does_not_resolve_the_candidate(tmp_path: Path) -> None:
    runs, out = start(tmp_path)  # the run evaluates on cpu.x86_64
    [request] = requests(out)
    delivery = Delivery(subject=subjects.evaluation_finished("cuda.h200"), deliveries=1, stream_sequence=1)
    handler = EventHandler(runs)
    await handler(generated(request, kernel(1)), delivery)
    candidate = f"{request.request_id}-c0"
    await handler(build_pb2.CandidateCompiled(candidate_id=candidate, run_id="run-1", ok=True), delivery)
    forged = evaluated(candidate, 9.0)
    forged.hardware = "cuda.h200"
    assert await handler(forged, delivery) == []
    assert runs.runs["run-1"].candidates[candidate].evaluation is None
    own = Delivery(subject=subjects.evaluation_finished("cpu.x86_64"), deliveries=1, stream_sequence=2)
    assert await handler(evaluated(candidate, 2.0), own) != []
    assert runs.runs["run-1"].candidates[candidate].evaluation is not None
