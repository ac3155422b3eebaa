"""Splitting task.kf text into marked sections, and the static outline of a reference."""

from __future__ import annotations

import pytest

from kernelfoundry.tasks.model import TaskError
from kernelfoundry.tasks.outline import outline_reference
from kernelfoundry.tasks.sections import has_sections, split_sections


def test_sections_carry_kind_arguments_options_line_and_trimmed_body():
    text = (
        "# header comment\n\n"
        "# kf:section instructions\n\nbe quick\n\n"
        "# kf:section kernel cuda entry=go\n  body\n"
    )
    instructions, kernel = split_sections(text, "t.kf")
    assert (instructions.kind, instructions.line, instructions.body) == ("instructions", 3, "be quick\n")
    assert (kernel.kind, kernel.arguments, dict(kernel.options)) == ("kernel", ("cuda",), {"entry": "go"})
    assert kernel.body == "  body\n"


def test_marker_must_start_the_line():
    assert not has_sections("x = 1  # kf:section reference\n")
    assert has_sections("x = 1\n# kf:section reference\n")


def test_text_before_the_first_marker_is_rejected_with_its_line():
    with pytest.raises(TaskError, match=r"t\.kf:2"):
        split_sections("# ok\nx = 1\n# kf:section reference\n", "t.kf")


def test_outline_collects_module_level_names_but_not_locals():
    outline = outline_reference(
        "import torch.nn as nn\nimport os.path\nfrom x import y as z\nn: int = 3\n"
        "for i in range(2):\n    j = i\n"
        "try:\n    k = 1\nexcept Exception:\n    e = 2\nwith open('f') as fh:\n    pass\n"
        "class Model:\n    inner = 1\ndef get_inputs():\n    local = 2\n",
        "t",
    )
    assert {"nn", "os", "z", "n", "i", "j", "k", "e", "fh", "Model", "get_inputs"} <= outline.globals
    assert not {"inner", "local"} & outline.globals
