"""The heuristic proposer covers every KernelBench task of levels 1 and 2 (../shared/kernelbench).

Fast: every task, both backends, gets candidates at reduced sizes (kernelfoundry.tasks.scaling), none
raises, and each candidate launches a kernel of its own (no glue, or glue with `kf.launch`).
Slow (`slow` marker): on the CPU, the first candidate the proposer ranks best is built with g++
(the build cache under `.kf/test-build-cache`, or KF_TEST_BUILD_CACHE) and judged by the product's
evaluator; the next is tried only when it fails. Skipped cleanly when the task folder is absent.
By default the slow test walks a fixed sample of every SAMPLE_STRIDE-th task, so that the README's test
command stays within CI's time on 2 cores; KF_KERNELBENCH_WALK=all walks all 176 (about 15-30 minutes).
KF_KERNELBENCH_WALK_OUT=path appends one JSON line per walked task (task, correct, the rank of the
correct candidate, each tried candidate's outcome) so that a whole walk can be summarised.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

from kernelfoundry.generators.base import GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.tasks.model import ShapeVariant, Task
from kernelfoundry.tasks.scaling import reduced_sizes

ROOT = Path(__file__).resolve().parents[2]
KERNELBENCH = ROOT.parent / "shared" / "kernelbench"
FILES = sorted(KERNELBENCH.glob("level[12]/*.py")) if KERNELBENCH.is_dir() else []
# Small enough that a direct-translation kernel of any task runs in milliseconds on one core.
MAX_ELEMENTS = 2**18
MAX_FLOPS = 2**24
CANDIDATES_TRIED = 3

SAMPLE_STRIDE = 11
WALKED = FILES if os.environ.get("KF_KERNELBENCH_WALK") == "all" else FILES[::SAMPLE_STRIDE]

WALK_OUT = os.environ.get("KF_KERNELBENCH_WALK_OUT")

pytestmark = pytest.mark.skipif(not FILES, reason="../shared/kernelbench is absent")


def task_id(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


@cache
def reduced_task(path: Path) -> Task:
    source = path.read_text()
    sizes = reduced_sizes(source, MAX_ELEMENTS, MAX_FLOPS)
    return Task(task_id(path), source, shapes=(ShapeVariant("cpu_reduced", sizes),))


def record_walk(task: str, correct_rank: int | None, outcomes: list[str]) -> None:
    """One JSON line for the walked task into KF_KERNELBENCH_WALK_OUT (nothing when it is unset)."""
    if not WALK_OUT:
        return
    line = {"task": task, "correct": correct_rank is not None, "rank": correct_rank, "outcomes": outcomes}
    with open(WALK_OUT, "a") as out:
        out.write(json.dumps(line) + "\n")


def test_all_176_tasks_are_here() -> None:
    assert len(FILES) == 176


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_every_task_gets_candidates_that_launch_a_generated_kernel(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """And settling hands a node back to torch only where an emitter refuses it (UnsupportedGraph): an
    emitter that raises anything else has a bug, which the demotion would hide as lost coverage."""
    import kernelfoundry.generators.heuristic.settle as settling

    generator = HeuristicGenerator()
    failures = []
    demote = settling.demote
    settling_now = {"task": ""}

    def demote_on_refusals_only(graph: object, failure: str) -> object:
        if not failure.startswith("unsupported"):
            failures.append(f"{settling_now['task']}: settling demoted a node on an error: {failure}")
        return demote(graph, failure)  # type: ignore[arg-type]

    monkeypatch.setattr(settling, "demote", demote_on_refusals_only)
    for path in FILES:
        settling_now["task"] = task_id(path)
        result = generator.generate_sync(GenerationRequest("cov", reduced_task(path), backend, count=8))
        if result.error or not result.candidates:
            failures.append(f"{task_id(path)}: {result.error}: {result.message}")
            continue
        for c in result.candidates:
            if c.source.glue and "kf.launch(" not in c.source.glue:
                failures.append(f"{task_id(path)}: a candidate's glue launches no generated kernel")
    assert not failures, "\n".join(failures)


@pytest.fixture(scope="module")
def cpu_worker() -> Iterator[object]:
    from kernelfoundry.evaluation import EvaluationWorker

    # One thread: OpenMP barriers on a shared, oversubscribed CI host stall back-to-back calls and
    # the judge's timing cross-check then reads the kernel as slower than it claimed.
    with EvaluationWorker("cpu", cpu_threads=1) as worker:
        yield worker


@pytest.fixture(scope="module")
def build_cache() -> object:
    from kernelfoundry.toolchains import BuildCache

    return BuildCache(Path(os.environ.get("KF_TEST_BUILD_CACHE", ROOT / ".kf" / "test-build-cache")))


@pytest.mark.slow
@pytest.mark.parametrize("path", WALKED, ids=[task_id(p) for p in WALKED])
def test_the_cpu_candidate_ranked_first_is_correct(
    path: Path, cpu_worker: object, build_cache: object
) -> None:
    from kernelfoundry.evaluation import EvaluationRequest, EvaluationSettings
    from kernelfoundry.toolchains import BuildTarget, build

    task = reduced_task(path)
    result = HeuristicGenerator().generate_sync(GenerationRequest("cov", task, "cpu", count=CANDIDATES_TRIED))
    if not result.candidates:
        record_walk(task.name, None, [f"no candidate: {result.error}: {result.message}"])
    assert result.candidates, result.message
    settings = EvaluationSettings(
        warmup_runs=0,
        timed_runs=3,
        flush_cache=False,
        cpu_threads=1,
        deadline_s=120.0,
        measure_baselines=False,
    )
    outcomes = []
    for rank, candidate in enumerate(result.candidates[:CANDIDATES_TRIED]):
        built = build(candidate.source, BuildTarget("cpu", "x86_64"), build_cache)
        if not built.ok or built.artifact is None:
            outcomes.append(f"build failed: {built.log[-500:]}")
            continue
        report = cpu_worker.evaluate(  # type: ignore[attr-defined]
            EvaluationRequest(task, candidate.source, built.artifact, "cpu", settings)
        )
        if report.correct:
            record_walk(task.name, rank, [*outcomes, "correct"])
            return
        outcomes.append(f"{report.reason}: {report.message}")
    record_walk(task.name, None, outcomes)
    pytest.fail(f"no correct candidate among the first {CANDIDATES_TRIED}: {outcomes}")


def _run_candidate(source: object, task: Task, unit: object) -> tuple[object, object]:
    """The candidate's output and the reference's on one CUDA input set (glue or a bare entry point)."""
    import torch
    from torch import nn

    from kernelfoundry.tasks.reference import instantiate

    def on_gpu(values: list[object]) -> list[object]:
        """Python scalars as 0-d device tensors, as the evaluator passes them."""
        return [v if isinstance(v, torch.Tensor) else torch.tensor(float(v), device="cuda") for v in values]

    reference = instantiate(task, task.shapes[0], seed=1, device="cuda")
    with torch.no_grad():
        expected = reference.model(*reference.inputs)
        if source.glue:  # type: ignore[attr-defined]

            class Launcher:
                def launch(self, entry: str, inputs: list[object], outputs: list[object]) -> None:
                    rc = unit.call(entry, on_gpu(inputs), outputs)  # type: ignore[attr-defined]
                    assert rc == 0, rc

            namespace = {"torch": torch, "nn": nn, "F": torch.nn.functional, "kf": Launcher()}
            exec(compile(source.glue, "<glue>", "exec"), namespace)  # type: ignore[attr-defined]
            model = namespace["ModelNew"](*reference.init_inputs).cuda()
            model.load_state_dict(reference.model.state_dict(), strict=False)  # by name, as the runner
            got = model(*reference.inputs)
        else:
            state = [*reference.model.parameters(), *reference.model.buffers()]
            outputs = expected if isinstance(expected, tuple) else (expected,)
            got_outputs = [torch.full_like(o, float("nan")) for o in outputs]
            rc = unit.call(source.entry_point, on_gpu([*reference.inputs, *state]), got_outputs)  # type: ignore[attr-defined]
            assert rc == 0, rc
            got = got_outputs[0] if len(got_outputs) == 1 else tuple(got_outputs)
        torch.cuda.synchronize()
    return got, expected


@pytest.mark.gpu
def test_the_cuda_candidate_ranked_first_is_correct_on_a_gpu(tmp_path: Path) -> None:
    """Every task's first CUDA seed, built with nvcc and run on the GPU, matches torch (or one of the
    next two does). Builds run 16 at a time; skipped without a GPU and nvcc."""
    import shutil
    import sys
    from concurrent.futures import ThreadPoolExecutor

    import torch

    if shutil.which("nvcc") is None or not torch.cuda.is_available():
        pytest.skip("needs nvcc and a CUDA device")
    sys.path.insert(0, str(ROOT / "tests" / "integration" / "generators"))
    from native import Unit, build_unit

    generator = HeuristicGenerator()
    ranked = {}
    for path in FILES:
        result = generator.generate_sync(GenerationRequest("cov", reduced_task(path), "cuda", count=3))
        assert result.candidates, f"{task_id(path)}: {result.message}"
        ranked[path] = [c.source for c in result.candidates[:CANDIDATES_TRIED]]

    def build_one(item: tuple[Path, int]) -> tuple[Path, int, object]:
        path, i = item
        try:
            return path, i, build_unit(ranked[path][i], tmp_path)
        except RuntimeError as exc:
            return path, i, exc

    failures: dict[str, list[str]] = {}
    passed: set[str] = set()
    for rank in range(CANDIDATES_TRIED):
        todo = [(p, rank) for p in FILES if task_id(p) not in passed and rank < len(ranked[p])]
        with ThreadPoolExecutor(16) as pool:
            built = list(pool.map(build_one, todo))
        for path, i, lib in built:
            name = task_id(path)
            if isinstance(lib, Exception):
                failures.setdefault(name, []).append(f"seed {i}: {lib}"[:400])
                continue
            try:
                got, expected = _run_candidate(ranked[path][i], reduced_task(path), Unit(lib))
                if isinstance(expected, torch.Tensor) and expected.dtype != torch.float32:
                    ok = torch.equal(got, expected)
                else:
                    ok = torch.allclose(got, expected, rtol=1e-3, atol=1e-3, equal_nan=True)
            except Exception as exc:  # a failing candidate is recorded, the next one is tried
                failures.setdefault(name, []).append(f"seed {i}: {type(exc).__name__}: {exc}"[:400])
                continue
            if ok:
                passed.add(name)
            else:
                error = (got - expected).abs().max().item()
                failures.setdefault(name, []).append(f"seed {i}: max abs error {error:.3g}")
    missing = {name: why for name, why in failures.items() if name not in passed}
    # in the order they ran: an illegal address poisons the context for every later task
    assert not missing, "\n".join(f"{k}: {v}" for k, v in missing.items())
