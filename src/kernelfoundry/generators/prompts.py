"""Prompts written like a kernel engineer's brief, and the meta-prompter's request.

A kernel prompt carries: the task (reference code, the shape variants it is timed at, dtypes as the
reference creates them, the tolerance), the target device and its hardware's facts, the kernel ABI with
a minimal example, the parent kernel with its measured time, the run's eager and torch.compile times,
its speedup and strategy (or, for a repair, the failed kernel and what the evaluator said), the best
kernels of other archive cells as inspiration, the mutation to apply with the hints from the transition
statistics, the evolving guidance sections of the prompt variant, and the answer format that
kernelfoundry.generators.parsing reads. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kernelfoundry.domain.descriptors import DESCRIPTOR_AXES, Descriptors
from kernelfoundry.domain.metaprompt import Feedback
from kernelfoundry.generators.base import GenerationRequest

FEEDBACK_CHARS = 3000
REFERENCE_CHARS = 20_000
PARENT_CHARS = 30_000
INSPIRATION_CHARS = 6000  # each inspiration kernel's source, trimmed in the middle beyond this

# Figures of devices a run's hardware token may name (`cuda.<model>`), from the vendors' data sheets.
DEVICE_FACTS: Mapping[str, str] = {
    "h200": (
        "NVIDIA H200 (Hopper, sm_90): 132 SMs; 141 GB HBM3e at about 4.8 TB/s; 50 MB L2; up to 228 KiB"
        " shared memory per SM (227 KiB per block with cudaFuncSetAttribute); FP32 on the CUDA cores about"
        " 67 TFLOP/s."
    ),
    "h100": (
        "NVIDIA H100 SXM (Hopper, sm_90): 132 SMs; 80 GB HBM3 at about 3.35 TB/s; 50 MB L2; up to 228 KiB"
        " shared memory per SM (227 KiB per block with cudaFuncSetAttribute); FP32 on the CUDA cores about"
        " 67 TFLOP/s."
    ),
    "a100": (
        "NVIDIA A100 (Ampere, sm_80): 108 SMs; 40 or 80 GB HBM2e at 1.6-2.0 TB/s; 40 MB L2; up to 164 KiB"
        " shared memory per SM (163 KiB per block with cudaFuncSetAttribute); FP32 19.5 TFLOP/s."
    ),
}

HARDWARE_FACTS: Mapping[str, str] = {
    "cpu": (
        "x86-64 host CPU; the unit is built with g++ (or clang++) -O3 -fno-math-errno -fopenmp -std=c++17"
        " -march=x86-64-v3 where the host has AVX2/FMA (baseline x86-64 otherwise): OpenMP is available;"
        " guard intrinsics with #ifdef __AVX2__ / __FMA__ (AVX-512 is not enabled). Caches: about 32-48 KiB"
        " L1d and 1-2 MiB L2 per core, a shared L3. Memory-bound work is limited by DRAM bandwidth: one pass"
        " over the data beats several."
    ),
    "cuda": (
        "NVIDIA GPU; the unit is built with nvcc -O3 -std=c++17 for the executor's architecture (sm_80 or"
        " newer; on Hopper for sm_90a, so wgmma is available). Warp size 32; up to 1024 threads per block;"
        " 48 KiB of static shared memory per block (more with cudaFuncSetAttribute); 64K 32-bit registers"
        " per SM. Global memory wants coalesced"
        " 128-byte accesses (float4 loads); data-centre GPUs read several TB/s (an H200 about 4.8 TB/s), so"
        " memory-bound kernels should make a single pass. All work goes on the `stream` argument."
    ),
}

ABI_EXAMPLE: Mapping[str, str] = {
    "cpu": """\
#include <stdint.h>
#include "kf_abi.h"

KF_DEFINE_ABI_VERSION()

// y = a * b + a for float32 tensors of any shape
KF_EXPORT int kf_forward(const kf_tensor* in, int32_t n_in, kf_tensor* out, int32_t n_out, void* stream) {
  if (n_in != 2 || n_out != 1) return KF_ERR_BAD_ARGUMENTS;
  const float* a = KF_DATA(const float, &in[0]);
  const float* b = KF_DATA(const float, &in[1]);
  float* y = KF_DATA(float, &out[0]);
  const int64_t n = kf_numel(&out[0]);
#pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] * b[i] + a[i];
  return KF_OK;
}
""",
    "cuda": """\
#include <stdint.h>
#include <cuda_runtime.h>
#include "kf_abi.h"

KF_DEFINE_ABI_VERSION()

__global__ void fma_kernel(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a[i] * b[i] + a[i];
}

// y = a * b + a for float32 tensors of any shape
KF_EXPORT int kf_forward(const kf_tensor* in, int32_t n_in, kf_tensor* out, int32_t n_out, void* stream) {
  if (n_in != 2 || n_out != 1) return KF_ERR_BAD_ARGUMENTS;
  const int64_t n = kf_numel(&out[0]);
  int threads = 256;
  int64_t blocks = (n + threads - 1) / threads;
  fma_kernel<<<blocks, threads, 0, (cudaStream_t)stream>>>(
      KF_DATA(const float, &in[0]), KF_DATA(const float, &in[1]), KF_DATA(float, &out[0]), n);
  return cudaGetLastError() == cudaSuccess ? KF_OK : KF_ERR_LAUNCH;
}
""",
}

ABI_RULES = """\
- One translation unit that includes "kf_abi.h", calls KF_DEFINE_ABI_VERSION() once and exports
  `int kf_forward(const kf_tensor* inputs, int32_t n_inputs, kf_tensor* outputs, int32_t n_outputs,
  void* stream)` with KF_EXPORT. Return KF_OK (0) on success, KF_ERR_* otherwise.
- Inputs, in order: every tensor get_inputs() returns (Python scalars as 0-d tensors), then the
  module's parameters (named_parameters() order), then its buffers. Outputs: the reference's outputs,
  preallocated with its shapes and dtypes. kf_tensor is DLPack's DLTensor: data, ndim, dtype, shape,
  strides (in elements), byte_offset; use KF_DATA(T, t) and kf_numel(t).
- Outputs are poisoned before every call: write every element, on every call. Never read or keep
  results of earlier calls, never modify inputs, leave no work running after returning: the evaluator
  checks all of this and rejects such kernels.
- Tunables: declare `// @kf.tunable NAME in [v1, v2, ...] default v` and guard the macro with
  #ifndef NAME; the search sweeps the values."""

ANSWER_FORMAT = """\
Answer with exactly one fenced ```{tag} block holding the whole translation unit, then one ```json block
with your strategy: {{"memory": 0-3, "algorithm": 0-3, "parallelism": 0-3, "rationale": "one or two
sentences"}}. Levels: {levels}. No other code blocks."""

SYSTEM = (
    "You are a senior performance engineer who writes {language} kernels. You are given a brief: a"
    " PyTorch reference, the hardware, the kernel ABI and what was tried before. Write a kernel that"
    " computes exactly what the reference computes (within its tolerance) and runs faster. Correctness"
    " first: a fast wrong kernel is worthless and is rejected."
)

_DTYPES = re.compile(r"\b(?:torch\.)?(float16|half|bfloat16|float64|double|int8|int32|int64|bool)\b")


@dataclass(frozen=True)
class Prompt:
    system: str
    user: str


def kernel_prompt(request: GenerationRequest, hardware_notes: str = "") -> Prompt:
    """The brief for one generation request (seed, mutation or repair)."""
    backend = request.backend
    language = "CUDA C++" if backend == "cuda" else "C++/OpenMP"
    sections: list[tuple[str, str]] = [
        ("Task", _task_section(request)),
        ("Target hardware", _hardware_section(request, hardware_notes)),
        (
            "Kernel ABI",
            ABI_RULES
            + "\n\nA minimal complete unit:\n```"
            + _tag(backend)
            + "\n"
            + ABI_EXAMPLE.get(backend, ABI_EXAMPLE["cpu"])
            + "```",
        ),
    ]
    parent = request.parent
    if request.repair and parent is not None:
        sections.append(
            (
                "Repair this kernel",
                "This kernel failed. Fix the cause and keep its approach where you can.\n"
                "What the build or the evaluator said:\n"
                + (_trim(parent.feedback, FEEDBACK_CHARS) or "(no message)")
                + "\n\n"
                + _code(parent.source.code, backend),
            )
        )
    elif parent is not None:
        sections.append(("Parent kernel", _parent_section(request)))
        if request.inspirations:
            sections.append(("Kernels that worked in other archive cells", _inspiration_section(request)))
        sections.append(("What to do", _mutation_section(request)))
    else:
        if request.inspirations:
            sections.append(("Kernels that worked in other archive cells", _inspiration_section(request)))
        sections.append(
            (
                "What to do",
                "Write a first kernel for this task: a correct, straightforward one that already fuses the"
                " operations into one pass where the data allows.",
            )
        )
    if request.hints:
        sections.append(("Hints from the search so far", "\n".join(f"- {h}" for h in request.hints)))
    for name, text in sorted(request.guidance.items()):
        if text.strip():
            sections.append((f"Guidance: {name}", text.strip()))
    levels = "; ".join(
        f"{axis.name}: " + ", ".join(f"{i} {lvl}" for i, lvl in enumerate(axis.levels))
        for axis in DESCRIPTOR_AXES
    )
    sections.append(("Answer format", ANSWER_FORMAT.format(tag=_tag(backend), levels=levels)))
    user = "\n\n".join(f"## {title}\n{body}" for title, body in sections)
    return Prompt(SYSTEM.format(language=language), user)


def _task_section(request: GenerationRequest) -> str:
    task = request.task
    lines = [f"Name: {task.name}"]
    if task.instructions.strip():
        lines.append(f"Instructions: {task.instructions.strip()}")
    shapes = [
        f"{s.name}: "
        + (", ".join(f"{k}={v}" for k, v in sorted(s.overrides.items())) or "as in the reference")
        for s in task.shapes
    ]
    lines.append("Timed at these shape variants (module-level constants overridden): " + "; ".join(shapes))
    dtypes = sorted(set(m.group(1) for m in _DTYPES.finditer(task.reference_source)))
    lines.append(
        "Dtypes: as get_inputs() creates them"
        + (
            f" (the reference mentions {', '.join(dtypes)})"
            if dtypes
            else " (float32 unless it says otherwise)"
        )
    )
    if task.tolerance is not None:
        lines.append(f"Tolerance: atol {task.tolerance.atol:g}, rtol {task.tolerance.rtol:g}")
    lines.append(
        "Reference (PyTorch):\n```python\n" + _trim(task.reference_source, REFERENCE_CHARS) + "\n```"
    )
    return "\n".join(lines)


def _hardware_section(request: GenerationRequest, hardware_notes: str) -> str:
    """The device the kernel will run on (the run's hardware token, its figures where known, the build
    target), the backend's facts, and the provider's own notes."""
    lines = []
    if request.hardware:
        _, _, model = request.hardware.partition(".")
        device = f"Device: {model or request.hardware} (the run's hardware `{request.hardware}`"
        if request.build_target:
            device += f", kernels built for `{request.build_target}`"
        lines.append(device + ")")
        if model in DEVICE_FACTS:
            lines.append(DEVICE_FACTS[model])
    lines.append(HARDWARE_FACTS.get(request.backend, request.backend))
    if hardware_notes:
        lines.append(hardware_notes)
    return "\n".join(lines)


def _parent_section(request: GenerationRequest) -> str:
    parent = request.parent
    assert parent is not None
    facts = []
    if parent.runtime_ms:
        facts.append(f"median time {parent.runtime_ms:.4g} ms")
    if parent.speedup:
        facts.append(f"{parent.speedup:.3g}x PyTorch eager")
    if parent.eager_ms:
        baselines = f"the run's PyTorch eager time {parent.eager_ms:.4g} ms"
        if parent.compile_ms:
            baselines += f", torch.compile {parent.compile_ms:.4g} ms"
        facts.append(baselines + " (medians over the run's evaluations)")
    if parent.roofline_fraction:
        term = {"memory": "bytes moved / memory bandwidth", "compute": "FLOPs / float32 peak"}.get(
            parent.bound, "the larger of bytes / bandwidth and FLOPs / peak"
        )
        facts.append(
            f"{parent.roofline_fraction:.0%} of the roofline floor ({parent.bound or 'roofline'}-bound: "
            f"{term}, measured on the target device)"
        )
    facts.append("strategy " + describe(parent.descriptors, request.backend))
    tunables = ", ".join(f"{t.name} in {list(t.values)}" for t in parent.source.tunables)
    if tunables:
        facts.append(f"tunables {tunables}")
    return "Measured: " + "; ".join(facts) + ".\n" + _code(parent.source.code, request.backend)


def _inspiration_section(request: GenerationRequest) -> str:
    """The fastest kernels of other archive cells: ideas to borrow, not kernels to copy."""
    parts = [
        "Other strategies the search found correct, fastest first. Borrow what helps; the kernel you"
        " write must still do what is asked below."
    ]
    for n, kernel in enumerate(request.inspirations, 1):
        facts = []
        if kernel.speedup:
            facts.append(f"{kernel.speedup:.3g}x PyTorch eager")
        if kernel.runtime_ms:
            facts.append(f"median time {kernel.runtime_ms:.4g} ms")
        facts.append("strategy " + describe(kernel.descriptors, request.backend))
        code = _trim(kernel.source.code, INSPIRATION_CHARS)
        parts.append(
            f"### Inspiration {n}: " + "; ".join(facts) + f"\n```{_tag(request.backend)}\n{code}\n```"
        )
    return "\n\n".join(parts)


def _mutation_section(request: GenerationRequest) -> str:
    mutation = request.mutation or "any"
    moves = [a.name for a in DESCRIPTOR_AXES if mutation in a.operators]
    text = f"Improve the parent kernel by applying the `{mutation}` change"
    if moves:
        text += f" (it moves the kernel along the {' and '.join(moves)} axis)"
    text += ". Keep it correct; make it faster."
    return text


def describe(descriptors: Descriptors, backend: str) -> str:
    words = []
    for axis in DESCRIPTOR_AXES:
        level = getattr(descriptors, axis.name)
        table = axis.words.get(backend, axis.words["cuda"])
        words.append(f"{axis.name} {level} ({table[level]})")
    return ", ".join(words)


def _code(code: str, backend: str) -> str:
    return f"```{_tag(backend)}\n{_trim(code, PARENT_CHARS)}\n```"


def _tag(backend: str) -> str:
    return "cuda" if backend == "cuda" else "cpp"


def _trim(text: str, limit: int) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n... ({len(text) - limit} characters cut) ...\n{text[-half:]}"


META_SYSTEM = (
    "You maintain the guidance sections of a prompt that asks a model to write fast, correct kernels."
    " You read what recently happened to the kernels it produced and rewrite the sections: short,"
    " concrete, actionable bullet points. Keep what still holds, drop what the record contradicts."
)


def metaprompt_prompt(sections: Mapping[str, str], feedback: Sequence[Feedback], backend: str) -> Prompt:
    """The meta-prompter's request: rewrite `sections` from recent successes and failures."""
    failures = [f for f in feedback if f.failed]
    successes = [f for f in feedback if f.succeeded]
    lines = [f"Backend: {backend}. The current sections:"]
    for name, text in sorted(sections.items()):
        lines.append(f"### {name}\n{text.strip() or '(empty)'}")
    lines.append(
        f"\nRecent record: {len(feedback)} kernels, {len(failures)} failed, {len(successes)} improved."
    )
    for f in failures[-8:]:
        message = _trim(f.message, 300).replace("\n", " ")
        lines.append(f"- failed ({f.label.removeprefix('failed:')}) after `{f.operator}`: {message}")
    for f in successes[-8:]:
        lines.append(f"- `{f.operator}` improved its parent by {100 * f.improvement:.0f}%")
    names = ", ".join(f'"{n}"' for n in sorted(sections))
    lines.append(
        f"\nAnswer with one ```json block: an object with exactly these keys: {names}; each value the"
        " new text of that section (at most 8 bullet points, each under 200 characters)."
    )
    return Prompt(META_SYSTEM, "\n".join(lines))
