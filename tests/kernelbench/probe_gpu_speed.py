"""A probe, not a test: the first CUDA seed of some KernelBench tasks against eager on this GPU.

    PYTHONPATH=src python3 tests/kernelbench/probe_gpu_speed.py [TASK_GLOB ...]

Sizes: kernelfoundry.tasks.scaling.reduced_sizes with a GPU-sized budget (2^25 elements, 2^34 FLOPs).
Times: median of 50 calls after 5 warm-ups, CUDA events, no cache flush (an indication, not the
evaluator's figure). Prints task, sizes, candidate ms, eager ms, speedup and whether the outputs match.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration" / "generators"))

DEFAULT_TASKS = [
    "level1/19_*",
    "level1/34_*",
    "level1/41_*",
    "level1/45_*",
    "level1/47_*",
    "level1/51_*",
    "level1/84_*",
    "level1/89_*",
    "level1/96_*",
    "level1/99_*",
    "level1/2_*",
]


def timed(fn: Any, runs: int = 50) -> float:
    import torch

    for _ in range(5):
        fn()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def probe(path: Path, out: Path) -> None:
    import torch
    from native import Unit, build_unit
    from torch import nn

    from kernelfoundry.generators.base import GenerationRequest
    from kernelfoundry.generators.heuristic import HeuristicGenerator
    from kernelfoundry.tasks.model import ShapeVariant, Task
    from kernelfoundry.tasks.reference import instantiate
    from kernelfoundry.tasks.scaling import reduced_sizes

    source = path.read_text()
    sizes = reduced_sizes(source, 2**25, 2**34)
    task = Task(path.stem, source, shapes=(ShapeVariant("gpu", sizes),))
    result = HeuristicGenerator().generate_sync(GenerationRequest("p", task, "cuda", count=1))
    kernel = result.candidates[0].source
    unit = Unit(build_unit(kernel, out))
    ref = instantiate(task, task.shapes[0], seed=1, device="cuda")
    ins = [x if isinstance(x, torch.Tensor) else torch.tensor(float(x), device="cuda") for x in ref.inputs]

    class Launcher:
        def launch(self, entry: str, inputs: list[Any], outputs: list[Any]) -> None:
            args = [
                x if isinstance(x, torch.Tensor) else torch.tensor(float(x), device="cuda") for x in inputs
            ]
            unit.call(entry, args, outputs)

    with torch.no_grad():
        expected = ref.model(*ref.inputs)
        if kernel.glue:
            namespace: dict[str, Any] = {
                "torch": torch,
                "nn": nn,
                "F": torch.nn.functional,
                "kf": Launcher(),
            }
            exec(compile(kernel.glue, "<glue>", "exec"), namespace)
            model = namespace["ModelNew"](*ref.init_inputs).cuda()
            model.load_state_dict(ref.model.state_dict(), strict=False)
            run = lambda: model(*ref.inputs)  # noqa: E731
        else:
            state = [*ref.model.parameters(), *ref.model.buffers()]
            got = torch.empty_like(expected)

            def run() -> Any:
                unit.call(kernel.entry_point, [*ins, *state], [got])
                return got

        got = run()
        torch.cuda.synchronize()
        ok = torch.allclose(got.float(), expected.float(), rtol=1e-3, atol=1e-3)
        kernel_ms = timed(run)
        eager_ms = timed(lambda: ref.model(*ref.inputs))
    print(
        f"{path.parent.name}/{path.stem:45s} {sizes!s:60s} kernel {kernel_ms:8.3f} ms"
        f"  eager {eager_ms:8.3f} ms  speedup {eager_ms / kernel_ms:6.2f}x  correct {ok}",
        flush=True,
    )


def main(patterns: list[str]) -> None:
    kernelbench = ROOT.parent / "shared" / "kernelbench"
    out = Path(tempfile.mkdtemp())
    for pattern in patterns:
        for path in sorted(kernelbench.glob(f"{pattern}.py")):
            probe(path, out)


if __name__ == "__main__":
    main(sys.argv[1:] or DEFAULT_TASKS)
