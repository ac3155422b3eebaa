"""A probe, not a test: where a KernelBench task's time goes in eager, torch.compile and the proposer's
first CUDA candidates, kernel by kernel.

    python3 tests/kernelbench/probe_candidate_kernels.py [--seeds N] [--no-compile] [--no-profile]
        [--params NAME=V[,NAME=V...]]... [LEVEL/STEM or LEVEL/N ...]

For each task (../shared/kernelbench or $KF_KERNELBENCH, at KernelBench's sizes): the median of 10
calls (CUDA events, 3 warm-ups, no cache flush: an indication, not the evaluator's figure) of eager,
torch.compile and each of the first N heuristic candidates (built with nvcc, run through their glue
in this process, not sandboxed: the proposer's own code only), then per variant the kernels one call
launches with their device time (torch.profiler), largest first: which kernel of a candidate loses
to which of torch.compile's. Under Nsight Compute (`scripts/device_checks.sh ncu-kernels`), `--no-profile`
leaves CUPTI to it and `--no-compile` skips torch.compile's many launches. Each `--params` set times a
candidate once more built with those tunables' values (where it declares them all), beside its default.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "generators"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from kernelbench import LEVELS, select  # the bench's task names: levelL/stem or levelL/N
from native import Unit, build_unit
from probe_conv_layouts import ms  # the same timing as the layout probe's

from kernelfoundry.generators.base import GenerationRequest
from kernelfoundry.generators.heuristic import HeuristicGenerator
from kernelfoundry.tasks.model import ShapeVariant, Task
from kernelfoundry.tasks.reference import instantiate

KB = Path(os.environ.get("KF_KERNELBENCH", Path(__file__).resolve().parents[3] / "shared" / "kernelbench"))
DEFAULT = [
    "level2/16_ConvTranspose2d_Mish_Add_Hardtanh_Scaling",
    "level2/31_Conv2d_Min_Add_Multiply",
]


class Launcher:
    def __init__(self, unit: Unit) -> None:
        self.unit = unit

    def launch(self, entry: str, inputs: list[Any], outputs: list[Any]) -> None:
        rc = self.unit.call(entry, inputs, outputs)
        if rc != 0:
            raise RuntimeError(f"{entry} returned {rc}")


def kernels(fn: Any, calls: int = 3) -> list[tuple[str, float]]:
    """(kernel name, device ms per call), largest first."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    totals: dict[str, float] = defaultdict(float)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            totals[event.name[:90]] += event.device_time / 1000.0 / calls
    return sorted(totals.items(), key=lambda kv: -kv[1])


def report(label: str, fn: Any, expected: torch.Tensor | None = None, profile: bool = True) -> None:
    with torch.no_grad():
        if expected is not None:
            got = fn()
            error = (got - expected).abs().max().item()
            label += f" (max error {error:.2e})"
        total = ms(fn)
        print(f"  {label}: {total:.3f} ms", flush=True)
        for name, t in kernels(fn)[:8] if profile else []:
            print(f"      {t:8.3f} ms  {name}", flush=True)


def candidate_call(source: Any, unit: Unit, model: nn.Module, inputs: list[Any], expected: Any) -> Any:
    """One call of a candidate as the evaluator makes it: its glue's ModelNew with the reference's
    state, or (no glue) the entry point on the inputs, then the parameters and buffers (the ABI order)."""
    launcher = Launcher(unit)
    if source.glue.strip():
        glue: dict[str, Any] = {"torch": torch, "nn": nn, "F": torch.nn.functional, "kf": launcher}
        exec(compile(source.glue, "<glue>", "exec"), glue)
        new = glue["ModelNew"]().cuda()
        new.load_state_dict(model.state_dict())
        return lambda: new(*inputs)
    direct = [t.detach() for t in [*model.parameters(), *model.buffers()]]
    outputs = [torch.empty_like(expected)]

    def call() -> Any:
        launcher.launch(source.entry_point, [*inputs, *direct], outputs)
        return outputs[0]

    return call


def task_path(task_id: str) -> Path:
    """The task file of `levelL/stem`, or of `levelL/N` (its problem number): the bench's own selection."""
    (path,) = select(KB, LEVELS, None, [task_id])
    return path


def probe(
    task_id: str,
    seeds: int,
    work: Path,
    with_compile: bool = True,
    profile: bool = True,
    param_sets: list[dict[str, str]] | None = None,
) -> None:
    path = task_path(task_id)
    task = Task(path.stem, path.read_text(), (ShapeVariant("full"),))
    ref = instantiate(task, task.shapes[0], seed=1, device="cuda")
    model, inputs = ref.model, ref.inputs
    print(f"== {task_id}", flush=True)
    with torch.no_grad():
        expected = model(*inputs)
    report("eager", lambda: model(*inputs), profile=profile)
    if with_compile:
        compiled = torch.compile(model)
        report("torch.compile", lambda: compiled(*inputs), profile=profile)
    result = HeuristicGenerator().generate_sync(GenerationRequest("probe", task, "cuda", count=seeds))
    for i, candidate in enumerate(result.candidates[:seeds]):
        source = candidate.source
        variant = source.code.splitlines()[1].removeprefix("// @kf.variant ")
        declared = {t.name for t in source.tunables}
        for params in [{}, *[p for p in param_sets or [] if set(p) <= declared]]:
            label = f"seed {i} {variant}" + (f" {params}" if params else "")
            try:
                unit = Unit(build_unit(source, work, params))
            except RuntimeError as e:
                print(f"  {label}: build failed {str(e)[:300]}", flush=True)
                continue
            report(label, candidate_call(source, unit, model, inputs, expected), expected, profile=profile)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="*", default=DEFAULT)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    parser.add_argument("--no-profile", action="store_true", help="no torch.profiler (under Nsight Compute)")
    parser.add_argument(
        "--params", action="append", default=[], help="NAME=V[,NAME=V...]: time the candidates built so too"
    )
    args = parser.parse_args()
    param_sets = [dict(kv.split("=", 1) for kv in spec.split(",")) for spec in args.params]
    with tempfile.TemporaryDirectory() as work:
        for task_id in args.tasks:
            try:
                probe(task_id, args.seeds, Path(work), not args.no_compile, not args.no_profile, param_sets)
            except Exception as e:  # a probe reports and goes on to the next task
                print(f"  {task_id}: {type(e).__name__}: {e}", flush=True)
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
