"""Reading kernels out of model answers: fenced blocks, structured output, and clear refusals."""

from __future__ import annotations

import json

import pytest

from kernelfoundry.domain.descriptors import Descriptors
from kernelfoundry.generators.parsing import parse_kernel
from kernelfoundry.generators.providers.transport import GenerationFailure

UNIT = """#include "kf_abi.h"
KF_DEFINE_ABI_VERSION()
// @kf.tunable TILE in [16, 32] default 32
KF_EXPORT int kf_forward(const kf_tensor* in, int32_t n_in, kf_tensor* out, int32_t n_out, void* s) {
  return KF_OK;
}
"""


def test_fenced_unit_with_strategy_block() -> None:
    text = (
        f"Plan first.\n```c++\n{UNIT}```\n```json\n"
        + '{"memory": 2, "algorithm": 1, "parallelism": 3, "rationale": "tiles"}\n```'
    )
    parsed = parse_kernel(text, "cpu")
    assert parsed.source.language == "cpp" and parsed.source.code.startswith('#include "kf_abi.h"')
    assert parsed.strategy == Descriptors(memory=2, algorithm=1, parallelism=3)
    assert parsed.rationale == "tiles"
    assert [(t.name, t.values, t.default) for t in parsed.source.tunables] == [("TILE", (16, 32), 32)]


def test_structured_output_object_with_glue_and_entry_point() -> None:
    code = UNIT.replace("kf_forward", "kf_rows")
    glue = "class ModelNew(torch.nn.Module):\n    pass\n"
    answer = json.dumps(
        {"code": code, "glue": glue, "entry_point": "kf_rows", "strategy": {"memory": 1}, "rationale": "r"}
    )
    parsed = parse_kernel(answer, "cuda")
    assert parsed.source.language == "cuda" and parsed.source.entry_point == "kf_rows"
    assert "ModelNew" in parsed.source.glue
    assert parsed.strategy == Descriptors(memory=1)


def test_out_of_range_levels_are_dropped_not_trusted() -> None:
    text = f"```cpp\n{UNIT}```\n```json\n" + '{"memory": 9, "algorithm": "high", "parallelism": 2}\n```'
    assert parse_kernel(text, "cpu").strategy == Descriptors(parallelism=2)


def test_the_unit_is_preferred_over_snippets() -> None:
    text = "```cpp\nfor (int i = 0; i < n; ++i) y[i] = x[i];\n```\nFull unit:\n```cpp\n" + UNIT + "```"
    assert "KF_DEFINE_ABI_VERSION" in parse_kernel(text, "cpu").source.code


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "empty"),
        ("Sorry, I can't.", "no ```cpp block"),
        ("```cpp\nint main() { return 0; }\n```", "kf_abi.h"),
        ("```cpp\n" + UNIT.replace("KF_DEFINE_ABI_VERSION()", "") + "```", "KF_DEFINE_ABI_VERSION"),
        ("```cpp\n" + UNIT.replace("kf_forward", "forward") + "```", "entry point `kf_forward`"),
        ("```cpp\n" + UNIT.replace("[16, 32]", "[16, 16]") + "```", "tunable"),
        ('{"code": "' + "x" * 10 + '", "glue": 3}', "glue"),
        (
            '{"code": "#include \\"kf_abi.h\\" KF_DEFINE_ABI_VERSION() kf_forward(", "entry_point": "a b"}',
            "identifier",
        ),
    ],
)
def test_unusable_answers_are_no_kernel_with_what_was_missing(text: str, words: str) -> None:
    with pytest.raises(GenerationFailure) as info:
        parse_kernel(text, "cpu")
    assert info.value.reason == "no_kernel" and words in info.value.message
