"""A probe, not a test: the first CUDA seed of some KernelBench tasks against eager on this GPU.

    PYTHONPATH=src python3 tests/kernelbench/probe_gpu_speed.py [--json FILE] [TASK_GLOB ...]

Tasks: ../shared/kernelbench (or $KF_KERNELBENCH); by default DEFAULT_TASKS, one or more per op family
whose CUDA kernels the heuristic proposer writes itself (scans, pooling, depthwise convolutions,
arg-reductions, losses and other full reductions, norms) plus a few others.
Sizes: kernelfoundry.tasks.scaling.reduced_sizes with a GPU-sized budget (2^25 elements, 2^34 FLOPs).
The units are generated and built with nvcc in parallel first, then timed one task at a time.
Times: median of 50 calls after 5 warm-ups, CUDA events, no cache flush (an indication, not the
evaluator's figure). Prints task, sizes, candidate ms, eager ms, speedup, the candidate's share of
the HBM floor (inputs, parameters and output read or written once at PEAK_BYTES_PER_S) and whether the
outputs match; --json writes the same rows.
Those times include the host's work between the start event and the launch (the ctypes descriptors
and the glue: tens of microseconds, against a few for eager's launch), since the GPU is idle when
the start event is recorded. The *_gpu_ms columns (and speedup_gpu, floor_gpu) time the same calls
with the GPU kept busy by a spin kernel (torch.cuda._sleep) queued before the start event, so that
the host's work overlaps it: the device time of the kernels alone.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration" / "generators"))

# H200 HBM3e
PEAK_BYTES_PER_S = 4.8e12

DEFAULT_TASKS = [
    # scans
    "level1/89_*",
    "level1/90_*",
    "level1/91_*",
    "level1/92_*",
    "level1/93_*",
    # pooling
    "level1/41_*",
    "level1/43_*",
    "level1/44_*",
    "level1/45_*",
    "level1/46_*",
    # depthwise convolutions
    "level1/83_*",
    "level1/84_*",
    "level1/85_*",
    "level1/86_*",
    # arg-reductions and reductions over a dim
    "level1/51_*",
    "level1/52_*",
    "level1/47_*",
    # losses and full reductions to a scalar
    "level1/94_*",
    "level1/96_*",
    "level1/98_*",
    "level1/99_*",
    "level1/100_*",
    # norms (rows in registers, rows split over blocks) and a norm kept in torch
    "level1/34_*",
    "level1/35_*",
    "level1/37_*",
    # a row reduction fused with its broadcast consumer (odd rows), long softmax rows re-read as float4
    "level1/38_*",
    "level1/24_*",
    # others
    "level1/19_*",
    "level1/2_*",
]


def kernelbench_dir() -> Path:
    return Path(os.environ.get("KF_KERNELBENCH", ROOT.parent / "shared" / "kernelbench"))


# GPU clock cycles of the spin kernel queued before the start event when the host's work is hidden
# (about 0.5 ms at the H200's clock: longer than the host's work before a launch)
HIDE_HOST_CYCLES = 1_000_000


def timed(fn: Any, runs: int = 50, hide_host: bool = False) -> float:
    import torch

    for _ in range(5):
        fn()
    times = []
    for _ in range(runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if hide_host:
            torch.cuda._sleep(HIDE_HOST_CYCLES)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def generate(path: Path) -> tuple[Any, Any, str]:
    """The task at GPU sizes and its first CUDA seed (or why there is none). Serial: torch.fx's
    symbolic tracing patches nn.Module.__call__ process-wide, so traces in parallel threads break
    each other ("module is not installed as a submodule")."""
    from kernelfoundry.generators.base import GenerationRequest
    from kernelfoundry.generators.heuristic import HeuristicGenerator
    from kernelfoundry.tasks.model import ShapeVariant, Task
    from kernelfoundry.tasks.scaling import reduced_sizes

    source = path.read_text()
    sizes = reduced_sizes(source, 2**25, 2**34)
    task = Task(path.stem, source, shapes=(ShapeVariant("gpu", sizes),))
    result = HeuristicGenerator().generate_sync(GenerationRequest("p", task, "cuda", count=1))
    if not result.candidates:
        return task, None, f"no candidate: {result.message}"
    return task, result.candidates[0].source, ""


def build(generated: tuple[Any, Any, str], out: Path) -> tuple[Any, Any, Path | str]:
    """The built library of a generated seed (or the reason there is none); builds run in parallel."""
    from native import build_unit

    task, kernel, error = generated
    if kernel is None:
        return task, kernel, error
    try:
        return task, kernel, build_unit(kernel, out)
    except RuntimeError as exc:
        return task, kernel, str(exc)[:500]


def _bytes(tensors: list[Any]) -> int:
    import torch

    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def probe(path: Path, task: Any, kernel: Any, lib: Path) -> dict[str, Any]:
    import torch
    from native import Unit
    from torch import nn

    from kernelfoundry.tasks.reference import instantiate

    unit = Unit(lib)
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
        ok = bool(torch.allclose(got.float(), expected.float(), rtol=1e-3, atol=1e-3))
        kernel_ms = timed(run)
        eager_ms = timed(lambda: ref.model(*ref.inputs))
        kernel_gpu_ms = timed(run, hide_host=True)
        eager_gpu_ms = timed(lambda: ref.model(*ref.inputs), hide_host=True)
    floor_ms = _bytes([*ins, *ref.model.parameters(), expected]) / PEAK_BYTES_PER_S * 1e3
    return {
        "task": f"{path.parent.name}/{path.stem}",
        "sizes": dict(task.shapes[0].overrides),
        "kernel_ms": kernel_ms,
        "eager_ms": eager_ms,
        "speedup": eager_ms / kernel_ms,
        "floor": floor_ms / kernel_ms,
        "kernel_gpu_ms": kernel_gpu_ms,
        "eager_gpu_ms": eager_gpu_ms,
        "speedup_gpu": eager_gpu_ms / kernel_gpu_ms,
        "floor_gpu": floor_ms / kernel_gpu_ms,
        "correct": ok,
    }


def main(argv: list[str]) -> None:
    json_out = None
    if argv[:1] == ["--json"]:
        json_out, argv = Path(argv[1]), argv[2:]
    kernelbench = kernelbench_dir()
    paths = [p for pattern in argv or DEFAULT_TASKS for p in sorted(kernelbench.glob(f"{pattern}.py"))]
    out = Path(tempfile.mkdtemp())
    workers = max(1, min(16, (os.cpu_count() or 2) - 1))
    with ThreadPoolExecutor(workers) as pool:
        generated = [generate(p) for p in paths]
        prepared = list(pool.map(lambda g: build(g, out), generated))
    rows = []
    for path, (task, kernel, lib) in zip(paths, prepared, strict=True):
        if not isinstance(lib, Path):
            print(f"{path.parent.name}/{path.stem:45s} FAILED {lib}", flush=True)
            rows.append({"task": f"{path.parent.name}/{path.stem}", "error": lib})
            continue
        row = probe(path, task, kernel, lib)
        rows.append(row)
        print(
            f"{row['task']:52s} {row['sizes']!s:50s} kernel {row['kernel_ms']:8.3f} ms"
            f"  eager {row['eager_ms']:8.3f} ms"
            f"  speedup {row['speedup']:6.2f}x  floor {row['floor']:6.1%}"
            f" | gpu: kernel {row['kernel_gpu_ms']:8.3f} ms  eager {row['eager_gpu_ms']:8.3f} ms"
            f"  speedup {row['speedup_gpu']:6.2f}x  floor {row['floor_gpu']:6.1%}  correct {row['correct']}",
            flush=True,
        )
    if json_out is not None:
        json_out.write_text(json.dumps(rows, indent=1, default=str))


if __name__ == "__main__":
    main(sys.argv[1:])
