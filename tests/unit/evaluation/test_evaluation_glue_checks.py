"""Static checks of the glue: each rule fires with its own reason, and honest glue passes."""

from __future__ import annotations

import textwrap

import pytest

from kernelfoundry.evaluation import check_glue, reasons

FMA_REFERENCE = textwrap.dedent(
    """
    class Model(nn.Module):
        def forward(self, a, b):
            return a * b + a
    """
)
MATMUL_REFERENCE = textwrap.dedent(
    """
    class Model(nn.Module):
        def forward(self, a, b):
            return torch.matmul(a, b)
    """
)
CONV_RELU_REFERENCE = textwrap.dedent(
    """
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 8, 3)
        def forward(self, x):
            return torch.relu(self.conv(x))
    """
)


def model_new(body: str, prelude: str = "") -> str:
    forward = textwrap.indent(textwrap.dedent(body).strip(), " " * 8)
    return f"{prelude}\nclass ModelNew(nn.Module):\n    def forward(self, a, b):\n{forward}\n"


HONEST = model_new(
    """
    y = torch.empty_like(a)
    kf.launch("kf_forward", [a, b], [y])
    return y
    """
)


def reasons_of(glue: str, reference: str = FMA_REFERENCE) -> list[str]:
    return [f.reason for f in check_glue(glue, reference)]


def test_honest_glue_passes() -> None:
    assert reasons_of(HONEST) == []


@pytest.mark.parametrize(
    ("glue", "reason"),
    [
        (
            model_new("try:\n    pass\nexcept Exception:\n    pass\nkf.launch('k', [a], [b])"),
            reasons.GLUE_TRY_EXCEPT,
        ),
        (model_new("kf.launch('k', [a], [b])", "import time"), reasons.GLUE_TIMER_PATCHING),
        (model_new("torch.cuda.Event = None\nkf.launch('k', [a], [b])"), reasons.GLUE_TIMER_PATCHING),
        (model_new("torch.matmul = lambda x, y: x\nkf.launch('k', [a], [b])"), reasons.GLUE_TIMER_PATCHING),
        (
            model_new("e = torch.cuda.Event(enable_timing=True)\nkf.launch('k', [a], [b])"),
            reasons.GLUE_TIMER_PATCHING,
        ),
        (model_new("kf.launch('k', [a], [b])", "import threading"), reasons.GLUE_THREADS),
        (
            model_new("kf.launch('k', [a], [b])", "from concurrent.futures import ThreadPoolExecutor"),
            reasons.GLUE_THREADS,
        ),
        (model_new("kf.launch('k', [a], [b])", "import subprocess"), reasons.GLUE_THREADS),
        (model_new("kf.launch('k', [a], [b])", "import multiprocessing"), reasons.GLUE_THREADS),
        (
            model_new("kf.launch('k', [a], [b])", "class Lazy(torch.Tensor):\n    pass"),
            reasons.GLUE_LAZY_TENSOR,
        ),
        (
            model_new(
                "kf.launch('k', [a], [b])", "class M:\n    def __torch_function__(self, *a):\n        pass"
            ),
            reasons.GLUE_LAZY_TENSOR,
        ),
        (model_new("open('/tmp/answer').read()\nkf.launch('k', [a], [b])"), reasons.GLUE_IO),
        (model_new("kf.launch('k', [a], [b])", "import socket"), reasons.GLUE_IO),
        (model_new("kf.launch('k', [a], [b])", "import urllib.request"), reasons.GLUE_IO),
        (model_new("kf.launch('k', [a], [b])", "import os"), reasons.GLUE_IO),
        (model_new("Path('x').read_text()\nkf.launch('k', [a], [b])"), reasons.GLUE_IO),
        (model_new("eval('1')\nkf.launch('k', [a], [b])"), reasons.GLUE_DYNAMIC_CODE),
        (model_new("return a * b"), reasons.GLUE_NO_KERNEL_LAUNCH),
        (model_new("return Model()(a, b)\nkf.launch('k', [a], [b])"), reasons.GLUE_REFERENCE_FALLBACK),
        (
            "class ModelNew(Model):\n    def forward(self, a, b):\n        kf.launch('k', [a], [b])\n",
            reasons.GLUE_REFERENCE_FALLBACK,
        ),
        ("def f(:\n", reasons.GLUE_SYNTAX_ERROR),
        ("kf.launch('k', [1], [2])\n", reasons.GLUE_MISSING_MODEL_NEW),
    ],
)
def test_rule_fires_with_its_reason(glue: str, reason: str) -> None:
    assert reason in reasons_of(glue)


def test_glue_redoing_every_reference_operation_is_a_fallback() -> None:
    glue = model_new("y = torch.empty_like(a)\nkf.launch('k', [a, b], [y])\nreturn a * b + a")
    assert reasons.GLUE_REFERENCE_FALLBACK in reasons_of(glue)


def test_in_place_variants_count_as_the_operation() -> None:
    glue = model_new(
        "y = torch.empty_like(a)\nkf.launch('k', [a, b], [y])\nreturn y.copy_(a).mul_(b).add_(a)"
    )
    assert reasons.GLUE_REFERENCE_FALLBACK in reasons_of(glue)


def test_calling_the_single_replaced_op_is_a_fallback() -> None:
    glue = model_new("y = torch.empty_like(a)\nkf.launch('k', [a, b], [y])\nreturn torch.matmul(a, b)")
    assert reasons.GLUE_REFERENCE_FALLBACK in reasons_of(glue, MATMUL_REFERENCE)
    operator_glue = model_new("y = torch.empty_like(a)\nkf.launch('k', [a, b], [y])\nreturn a @ b")
    assert reasons.GLUE_REFERENCE_FALLBACK in reasons_of(operator_glue, MATMUL_REFERENCE)


def test_keeping_one_heavy_op_of_several_is_allowed() -> None:
    glue = textwrap.dedent(
        """
        class ModelNew(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 8, 3)
            def forward(self, x):
                y = self.conv(x)
                kf.launch("relu_inplace", [y], [y])
                return y
        """
    )
    assert reasons_of(glue, CONV_RELU_REFERENCE) == []


def test_findings_name_the_line() -> None:
    glue = model_new("kf.launch('k', [a], [b])", "import threading")
    finding = check_glue(glue, FMA_REFERENCE)[0]
    assert finding.line == 1 and "threading" in finding.message
