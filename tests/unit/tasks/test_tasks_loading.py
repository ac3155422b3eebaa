"""Loading tasks: KernelBench files, the folder format, .kf files, text, and every malformed case."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from kernelfoundry.domain.kernel import Tunable
from kernelfoundry.tasks.loading import load_task, load_task_from_source
from kernelfoundry.tasks.model import DEFAULT_SHAPES, TaskError, Tolerance

FIXTURES = Path(__file__).parents[2] / "fixtures" / "tasks"

REFERENCE = textwrap.dedent(
    """\
    import torch
    import torch.nn as nn

    n = 8


    class Model(nn.Module):
        def forward(self, x):
            return torch.relu(x)


    def get_inputs():
        return [torch.randn(n)]
    """
)


def sectioned(config: str = "", extra: str = "", reference: str = REFERENCE) -> str:
    head = f"# kf:section config\n{config}\n" if config else ""
    return f"{head}# kf:section reference\n{reference}{extra}"


def folder(tmp_path: Path, yaml_text: str, kf_text: str) -> Path:
    task_dir = tmp_path / "my_task"
    task_dir.mkdir()
    (task_dir / "task.yaml").write_text(yaml_text)
    (task_dir / "task.kf").write_text(kf_text)
    return task_dir


def reason_of(call) -> TaskError:
    with pytest.raises(TaskError) as caught:
        call()
    return caught.value


def test_kernelbench_file_loads_with_its_stem_as_name_and_defaults():
    path = FIXTURES / "kernelbench_relu.py"
    task = load_task(path)
    assert task.name == "kernelbench_relu"
    assert task.reference_source == path.read_text()
    assert task.shapes == DEFAULT_SHAPES
    assert task.targets == ("cpu",)
    assert task.initial_kernels == ()


def test_folder_format_loads_config_sections_and_initial_kernels():
    task = load_task(FIXTURES / "scale_shift")
    assert task.name == "scale_shift"
    assert task.targets == ("cpu", "cuda")
    assert [(s.name, dict(s.overrides)) for s in task.shapes] == [
        ("small", {"batch_size": 4, "features": 32}),
        ("wide", {"batch_size": 2, "features": 256}),
    ]
    assert task.tolerance == Tolerance(atol=1e-5, rtol=1e-5)
    assert task.seeds == 3
    assert (
        task.budget.iterations,
        task.budget.wall_time_s,
        task.budget.evaluations,
        task.budget.patience,
    ) == (
        4,
        60.0,
        20,
        2,
    )
    assert task.instructions.startswith("Fuse the scale and shift")
    assert "class Model" in task.reference_source and "kf:section" not in task.reference_source
    cpp, cuda = task.initial_kernels
    assert cpp.language == "cpp" and cpp.entry_point == "kf_forward" and cpp.glue == ""
    assert cpp.tunables == (Tunable("BLOCK", (16, 32, 64), 32),)
    assert cpp.defines() == {"BLOCK": 32}
    assert "KF_DEFINE_ABI_VERSION()" in cpp.code and "kf:section" not in cpp.code
    assert cuda.language == "cuda" and cuda.entry_point == "scale_shift" and cuda.tunables == ()
    assert "class ModelNew" in cuda.glue


def test_task_yaml_path_loads_its_folder():
    assert load_task(FIXTURES / "scale_shift" / "task.yaml") == load_task(FIXTURES / "scale_shift")


def test_single_kf_file_takes_its_configuration_from_the_config_section():
    task = load_task(FIXTURES / "single_file.kf")
    assert task.name == "single_relu"
    assert task.seeds == 2
    assert "def get_inputs" in task.reference_source


def test_text_in_kernelbench_format_loads_under_the_given_name():
    task = load_task_from_source(REFERENCE, name="relu_text")
    assert task.name == "relu_text" and task.reference_source == REFERENCE


def test_text_takes_a_separate_configuration():
    task = load_task_from_source(
        REFERENCE, "relu_text", config_text="shapes: [{name: big, overrides: {n: 64}}]"
    )
    assert [s.name for s in task.shapes] == ["big"]


def test_sectioned_text_loads_like_a_kf_file():
    task = load_task_from_source(sectioned("seeds: 7"), "from_text")
    assert task.seeds == 7 and task.reference_source == REFERENCE


def test_yaml_exponent_without_a_dot_is_read_as_a_number():
    task = load_task_from_source(sectioned("tolerance: {atol: 1e-3, rtol: 2e-3}"), "t")
    assert task.tolerance == Tolerance(atol=1e-3, rtol=2e-3)


def test_loading_never_executes_the_reference(tmp_path):
    marker = tmp_path / "executed"
    source = f"open({str(marker)!r}, 'w').write('x')\nraise SystemExit(3)\n" + REFERENCE
    load_task_from_source(source, "side_effects")
    assert not marker.exists()


def test_missing_path_is_not_found(tmp_path):
    assert reason_of(lambda: load_task(tmp_path / "nope.py")).reason == "not_found"


@pytest.mark.parametrize("missing", ["task.yaml", "task.kf"])
def test_folder_without_one_of_its_files_is_not_found(tmp_path, missing):
    task_dir = folder(tmp_path, "seeds: 2\n", sectioned())
    (task_dir / missing).unlink()
    error = reason_of(lambda: load_task(task_dir))
    assert error.reason == "not_found" and missing in error.message


def test_unsupported_file_kind_is_bad_config(tmp_path):
    path = tmp_path / "task.txt"
    path.write_text(REFERENCE)
    assert reason_of(lambda: load_task(path)).reason == "bad_config"


def test_syntax_error_is_import_error_with_the_line():
    error = reason_of(lambda: load_task_from_source("import torch\ndef broken(:\n", "t"))
    assert error.reason == "import_error" and ":2:" in error.message


def test_reference_without_model_is_missing_model():
    source = REFERENCE.replace("class Model", "class Other")
    error = reason_of(lambda: load_task_from_source(source, "t"))
    assert error.reason == "missing_model" and "Model" in error.message


def test_reference_without_get_inputs_is_missing_get_inputs():
    source = REFERENCE.replace("def get_inputs", "def make_inputs")
    assert reason_of(lambda: load_task_from_source(source, "t")).reason == "missing_get_inputs"


def test_model_bound_by_assignment_or_import_counts_as_defined():
    source = "import torch\nfrom torch.nn import Identity as Model\nget_inputs = lambda: [torch.randn(2)]\n"
    assert load_task_from_source(source, "t").name == "t"


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ("colour: blue", "`colour`"),
        ("budget: {iterations: 3, speed: 2}", "`budget.speed`"),
        ("shapes: [{name: a, sizes: {n: 2}}]", "`shapes[0].sizes`"),
        ("tolerance: {atol: 1e-4, btol: 1}", "`tolerance.btol`"),
    ],
)
def test_unknown_configuration_key_is_bad_config_naming_the_key(config, named):
    error = reason_of(lambda: load_task_from_source(sectioned(config), "t"))
    assert error.reason == "bad_config" and named in error.message


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ("targets: [cpu, gpu]", "gpu"),
        ("targets: []", "targets"),
        ("targets: [cuda.SM90]", "SM90"),
        ("tolerance: {atol: 1e-4}", "tolerance.rtol"),
        ("tolerance: {atol: -1, rtol: 0}", "tolerance.atol"),
        ("tolerance: {atol: lots, rtol: 0}", "tolerance.atol"),
        ("seeds: 0", "seeds"),
        ("seeds: true", "seeds"),
        ("budget: {iterations: 2.5}", "budget.iterations"),
        ("budget: {wall_time_s: 0}", "budget.wall_time_s"),
        ("name: ''", "name"),
        ("[1, 2]", "mapping"),
        ("targets: [cpu\n  bad: {", "YAML"),
    ],
)
def test_invalid_configuration_value_is_bad_config_naming_the_key(config, named):
    error = reason_of(lambda: load_task_from_source(sectioned(config), "t"))
    assert error.reason == "bad_config" and named in error.message


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ("shapes: [{name: big, overrides: {batch: 4}}]", "`batch`"),
        ("shapes: [{name: a}, {name: a}]", "`a`"),
        ("shapes: []", "shapes"),
        ("shapes: [{name: 'two words'}]", "shapes[0].name"),
        ("shapes: [{name: a, overrides: {n: {x: 1}}}]", "shapes[0].overrides.n"),
        ("shapes: [{name: a, overrides: [n]}]", "shapes[0].overrides"),
    ],
)
def test_invalid_shape_is_bad_shape(config, named):
    error = reason_of(lambda: load_task_from_source(sectioned(config), "t"))
    assert error.reason == "bad_shape" and named in error.message


def test_shape_may_override_a_global_bound_inside_a_module_level_block():
    reference = REFERENCE.replace("n = 8", "if True:\n    n = 8\nelse:\n    m = 4")
    task = load_task_from_source(
        sectioned("shapes: [{name: a, overrides: {m: 2}}]", reference=reference), "t"
    )
    assert dict(task.shapes[0].overrides) == {"m": 2}


KERNEL = '#include "kf_abi.h"\nKF_DEFINE_ABI_VERSION()\n'


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("import torch\n# kf:section reference\n" + REFERENCE, "before the first"),
        ("# kf:section references\n" + REFERENCE, "unknown section kind `references`"),
        ("# kf:section\n" + REFERENCE, "names no kind"),
        (sectioned() + "# kf:section reference\n" + REFERENCE, "second `reference`"),
        ("# kf:section instructions\nbe fast\n", "no `# kf:section reference`"),
        (sectioned() + "# kf:section glue\nclass ModelNew: ...\n", "must follow the kernel"),
        (sectioned() + "# kf:section kernel fortran\n" + KERNEL, "one language"),
        (sectioned() + "# kf:section kernel cpp\n", "empty"),
        (sectioned() + "# kf:section kernel cpp block=4\n" + KERNEL, "unknown kernel option `block`"),
        (sectioned() + "# kf:section kernel cpp entry=\n" + KERNEL, "malformed section option"),
        (sectioned() + "# kf:section kernel cuda\n" + KERNEL, "targets cpu"),
        (
            sectioned() + "# kf:section kernel cpp\n// @kf.tunable B in 1, 2\n" + KERNEL,
            "cannot parse tunable",
        ),
    ],
)
def test_malformed_sections_are_bad_config(text, named):
    error = reason_of(lambda: load_task_from_source(text, "t"))
    assert error.reason == "bad_config" and named in error.message


def test_configuration_given_twice_is_bad_config(tmp_path):
    task_dir = folder(tmp_path, "seeds: 2\n", sectioned("seeds: 3"))
    error = reason_of(lambda: load_task(task_dir))
    assert error.reason == "bad_config" and "both configure" in error.message


def test_folder_name_is_the_task_name_when_config_names_none(tmp_path):
    assert load_task(folder(tmp_path, "seeds: 2\n", sectioned())).name == "my_task"


def test_non_utf8_file_is_bad_config(tmp_path):
    path = tmp_path / "latin.py"
    path.write_bytes(REFERENCE.encode() + b"# caf\xe9\n")
    assert reason_of(lambda: load_task(path)).reason == "bad_config"


def test_errors_carry_the_reason_in_their_text():
    error = reason_of(lambda: load_task_from_source("x = 1\n", "t"))
    assert str(error).startswith("missing_model: ")
