"""The kernel-engineer brief and the meta-prompter's request carry what a model needs."""

from __future__ import annotations

from dataclasses import replace

from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.domain.kernel import KernelSource, Tunable
from kernelfoundry.domain.metaprompt import Feedback
from kernelfoundry.generators.base import GenerationRequest, Inspiration, ParentKernel
from kernelfoundry.generators.prompts import kernel_prompt, metaprompt_prompt
from kernelfoundry.tasks.model import ShapeVariant, Task, Tolerance

REFERENCE = (
    "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
    "def get_inputs():\n    return [torch.randn(16, 1024, dtype=torch.float16)]\n"
)
TASK = Task(
    "relu",
    REFERENCE,
    instructions="Keep it elementwise.",
    shapes=(ShapeVariant("small", {"dim": 1024}), ShapeVariant("large", {"dim": 65536})),
    tolerance=Tolerance(1e-3, 1e-3),
)
PARENT = ParentKernel(
    KernelSource("cuda", "__global__ void k() {}\n", tunables=(Tunable("BLOCK", (128, 256), 256),)),
    Descriptors(memory=1, algorithm=1),
    speedup=1.7,
    runtime_ms=0.0421,
)


def test_a_mutation_brief_has_task_hardware_abi_parent_hints_and_guidance() -> None:
    request = GenerationRequest(
        "r1",
        TASK,
        "cuda",
        parent=PARENT,
        mutation="tiling",
        hints=("moving memory 1 -> 2 improved 4 of 5 children",),
        guidance={
            "common pitfalls": "- wrong_result in 3 of the last 10 children",
            "strategies that worked": "",
        },
    )
    prompt = kernel_prompt(request, hardware_notes="H200: 141 GB HBM3e")
    user = prompt.user
    assert "CUDA" in prompt.system
    for expected in (
        "return torch.relu(x)",
        "small: dim=1024; large: dim=65536",
        "float16",
        "atol 0.001",
        "Keep it elementwise.",
        "Warp size 32",
        "H200: 141 GB HBM3e",
        "KF_DEFINE_ABI_VERSION()",
        "<<<blocks, threads, 0, (cudaStream_t)stream>>>",
        "median time 0.0421 ms",
        "1.7x PyTorch eager",
        "memory 1 (coalesced)",
        "BLOCK in [128, 256]",
        "`tiling`",
        "memory axis",
        "moving memory 1 -> 2 improved 4 of 5 children",
        "## Guidance: common pitfalls",
        "```cuda",
        '"memory": 0-3',
    ):
        assert expected in user, expected
    assert "## Guidance: strategies that worked" not in user  # empty sections are left out


def test_a_seed_brief_for_cpu_and_a_repair_brief() -> None:
    seed = kernel_prompt(GenerationRequest("r1", TASK, "cpu"))
    assert "Write a first kernel" in seed.user and "#pragma omp parallel for" in seed.user
    assert "```cpp" in seed.user and "Parent kernel" not in seed.user
    broken = ParentKernel(
        KernelSource("cpp", "int broken;\n"), Descriptors(), None, None, "error: expected ';'"
    )
    repair = kernel_prompt(
        GenerationRequest("r2", TASK, "cpu", parent=broken, mutation="fusion", repair=True)
    )
    assert "## Repair this kernel" in repair.user
    assert "error: expected ';'" in repair.user and "int broken;" in repair.user


def test_long_feedback_and_sources_are_trimmed_in_the_middle() -> None:
    broken = ParentKernel(
        KernelSource("cpp", "x"), Descriptors(), None, None, "head\n" + "y" * 50_000 + "\ntail"
    )
    user = kernel_prompt(GenerationRequest("r", TASK, "cpu", parent=broken, repair=True)).user
    assert "head" in user and "tail" in user and "characters cut" in user and len(user) < 30_000


def test_the_meta_prompt_carries_sections_failures_and_successes() -> None:
    feedback = [
        Feedback(1, "tiling", "failed:wrong_result", -1.0, "max abs error 0.5 at (3, 7)"),
        Feedback(1, "vectorize", "improvement", 0.4),
    ]
    prompt = metaprompt_prompt(
        {"common pitfalls": "- old pitfall", "strategies that worked": ""}, feedback, "cpu"
    )
    assert "- old pitfall" in prompt.user and "max abs error 0.5 at (3, 7)" in prompt.user
    assert "`vectorize` improved its parent by 40%" in prompt.user
    assert '"common pitfalls", "strategies that worked"' in prompt.user


INSPIRATIONS = (
    Inspiration(
        KernelSource("cuda", "__global__ void warp_rows() { /* one warp per row */ }\n"),
        Descriptors(memory=2, algorithm=1, parallelism=2),
        speedup=2.4,
        runtime_ms=0.0213,
    ),
    Inspiration(
        KernelSource("cuda", "// start\n" + "int pad;\n" * 2000 + "// end of the long one\n"),
        Descriptors(memory=3),
        speedup=1.9,
        runtime_ms=None,
    ),
)


def test_a_mutation_brief_names_the_device_the_baselines_and_the_other_cells_best_kernels() -> None:
    parent = replace(PARENT, eager_ms=0.0716, compile_ms=0.0502)
    request = GenerationRequest(
        "r1",
        TASK,
        "cuda",
        parent=parent,
        mutation="tiling",
        inspirations=INSPIRATIONS,
        hardware="cuda.h200",
        build_target="cuda.sm90",
    )
    user = kernel_prompt(request).user
    for expected in (
        "Device: h200 (the run's hardware `cuda.h200`, kernels built for `cuda.sm90`)",
        "NVIDIA H200 (Hopper, sm_90): 132 SMs",
        "4.8 TB/s",
        "the run's PyTorch eager time 0.0716 ms, torch.compile 0.0502 ms",
        "## Kernels that worked in other archive cells",
        "### Inspiration 1: 2.4x PyTorch eager; median time 0.0213 ms; strategy memory 2",
        "one warp per row",
        "### Inspiration 2: 1.9x PyTorch eager; strategy memory 3",
        "// start",
        "// end of the long one",
        "characters cut",  # a long inspiration is trimmed in the middle
    ):
        assert expected in user, expected
    # the inspirations come before the change to apply, after the parent
    assert user.index("## Parent kernel") < user.index("## Kernels that worked") < user.index("## What to do")
    assert len(user) < 30_000


def test_a_seed_brief_shows_the_other_cells_kernels_and_a_repair_brief_does_not() -> None:
    seed = kernel_prompt(GenerationRequest("r1", TASK, "cuda", inspirations=INSPIRATIONS)).user
    assert "## Kernels that worked in other archive cells" in seed and "one warp per row" in seed
    broken = ParentKernel(KernelSource("cuda", "int broken;\n"), Descriptors(), None, None, "error")
    repair = GenerationRequest(
        "r2", TASK, "cuda", parent=broken, repair=True, inspirations=INSPIRATIONS, hardware="cuda.h200"
    )
    user = kernel_prompt(repair).user
    assert "one warp per row" not in user and "Device: h200" in user


def test_a_device_without_a_facts_entry_is_still_named_and_absent_figures_are_left_out() -> None:
    request = GenerationRequest("r1", TASK, "cpu", parent=PARENT, mutation="fusion", hardware="cpu.x86_64")
    user = kernel_prompt(request).user
    assert "Device: x86_64 (the run's hardware `cpu.x86_64`)" in user
    assert "eager time" not in user  # the parent carries no eager time
    assert "Device:" not in kernel_prompt(GenerationRequest("r2", TASK, "cpu")).user


def test_a_mutation_brief_gives_the_parent_s_roofline_fraction_and_what_bounds_it() -> None:
    parent = replace(PARENT, roofline_fraction=0.42, bound="memory")
    user = kernel_prompt(GenerationRequest("r1", TASK, "cuda", parent=parent, mutation="tiling")).user
    assert "42% of the roofline floor (memory-bound: bytes moved / memory bandwidth" in user
    without = kernel_prompt(GenerationRequest("r1", TASK, "cuda", parent=PARENT, mutation="tiling")).user
    assert "roofline floor" not in without
