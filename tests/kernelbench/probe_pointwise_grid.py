"""A probe, not a test: the proposer's pointwise CUDA seed at KernelBench's own sizes, launched with
its grid capped (65535 blocks that stride over the tensor, as generated until this probe's first run) and
uncapped (a block per chunk, as eager's elementwise kernels launch and the proposer now does), under each
BLOCK and PER_THREAD, against eager and a plain copy.

    PYTHONPATH=src python3 tests/kernelbench/probe_pointwise_grid.py [--json FILE] [TASK_GLOB ...]

Default tasks: level1/19_ReLU and level1/21_Sigmoid (1.6 G elements each). Times: median of 50 calls
after 5 warm-ups, CUDA events, the host's work hidden behind a spin kernel (probe_gpu_speed.timed).
"""

from __future__ import annotations

import itertools
import json
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from probe_gpu_speed import ROOT, kernelbench_dir, timed

sys.path.insert(0, str(ROOT / "tests" / "integration" / "generators"))

CAPPED = "const unsigned gx = (unsigned)(need < 65535 ? (need > 0 ? need : 1) : 65535);"
UNCAPPED = "const unsigned gx = (unsigned)(need < 2147483647 ? (need > 0 ? need : 1) : 2147483647);"
BLOCKS = (128, 256, 512)
PER_THREADS = (1, 2, 4, 8)


def variants(kernel: Any) -> dict[str, Any]:
    from dataclasses import replace

    assert CAPPED in kernel.code or UNCAPPED in kernel.code, "no pointwise launch in this seed"
    capped = replace(kernel, code=kernel.code.replace(UNCAPPED, CAPPED))
    uncapped = replace(kernel, code=kernel.code.replace(CAPPED, UNCAPPED))
    return {"capped": capped, "uncapped": uncapped}


def probe_task(path: Path, out: Path) -> list[dict[str, Any]]:
    import torch
    from native import Unit, build_unit

    from kernelfoundry.generators.base import GenerationRequest
    from kernelfoundry.generators.heuristic import HeuristicGenerator
    from kernelfoundry.tasks.loading import load_task
    from kernelfoundry.tasks.reference import instantiate

    task = load_task(path)
    result = HeuristicGenerator().generate_sync(GenerationRequest("p", task, "cuda", count=1))
    kernel = result.candidates[0].source
    grid = list(itertools.product(variants(kernel).items(), BLOCKS, PER_THREADS))

    def build(point: Any) -> Path:
        (_, source), block, per = point
        return build_unit(source, out, {"BLOCK": block, "PER_THREAD": per})

    with ThreadPoolExecutor(max(1, min(16, (os.cpu_count() or 2) - 1))) as pool:
        libs = list(pool.map(build, grid))
    ref = instantiate(task, task.shapes[0], seed=1, device="cuda")
    rows: list[dict[str, Any]] = []
    with torch.no_grad():
        expected = ref.model(*ref.inputs)
        got = torch.empty_like(expected)
        eager_ms = timed(lambda: ref.model(*ref.inputs), hide_host=True)
        copy_ms = timed(lambda: got.copy_(ref.inputs[0]), hide_host=True)
        print(f"{path.stem}: eager {eager_ms:.3f} ms, copy {copy_ms:.3f} ms", flush=True)
        for ((name, _), block, per), lib in zip(grid, libs, strict=True):
            unit = Unit(lib)

            def run(unit: Any = unit) -> None:
                unit.call(kernel.entry_point, list(ref.inputs), [got])

            got.zero_()
            run()
            torch.cuda.synchronize()
            ok = bool(torch.allclose(got, expected, rtol=1e-5, atol=1e-6))
            ms = timed(run, hide_host=True)
            rows.append(
                {
                    "task": path.stem,
                    "launch": name,
                    "BLOCK": block,
                    "PER_THREAD": per,
                    "ms": ms,
                    "eager_ms": eager_ms,
                    "copy_ms": copy_ms,
                    "x_eager": eager_ms / ms,
                    "correct": ok,
                }
            )
            print(
                f"  {name:8s} BLOCK {block:4d} PER_THREAD {per}: {ms:7.3f} ms"
                f"  x eager {eager_ms / ms:5.3f}  correct {ok}",
                flush=True,
            )
    return rows


def main(argv: list[str]) -> None:
    import torch

    json_out = None
    if argv[:1] == ["--json"]:
        json_out, argv = Path(argv[1]), argv[2:]
    patterns = argv or ["level1/19_ReLU", "level1/21_Sigmoid"]
    paths = [p for g in patterns for p in sorted(kernelbench_dir().glob(f"{g}.py"))]
    out = Path(tempfile.mkdtemp())
    rows: list[dict[str, Any]] = []
    for path in paths:
        rows += probe_task(path, out)
        torch.cuda.empty_cache()
    if json_out is not None:
        json_out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
