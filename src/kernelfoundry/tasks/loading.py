"""Loading a task from disk or from text into a Task, with static checks only.

Accepted forms (docs/tasks.md):
  * KernelBench: one `.py` file defining `Model`, `get_inputs` (and usually `get_init_inputs`);
    the task name is the file stem.
  * The project's folder: `task.yaml` (configuration) + `task.kf` (marked sections: reference,
    instructions, initial kernels with optional glue); the name is `name:` or the folder name.
  * A single `task.kf` file whose `config` section holds what task.yaml would.
Loading parses (`ast`, YAML) but never executes the reference: whether it runs is
kernelfoundry.tasks.validation's job, in a child process. Every problem raises TaskError with a
reason (not_found, bad_config, import_error, missing_model, missing_get_inputs, bad_shape).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from kernelfoundry.domain.kernel import DEFAULT_ENTRY_POINT, KernelSource
from kernelfoundry.domain.tunables import TunableError, parse_tunables
from kernelfoundry.tasks.config import TaskConfig, parse_config_text
from kernelfoundry.tasks.model import Task, TaskError
from kernelfoundry.tasks.outline import outline_reference
from kernelfoundry.tasks.sections import Section, has_sections, split_sections

TASK_CONFIG_FILE = "task.yaml"
TASK_SECTIONS_FILE = "task.kf"
SECTIONS_SUFFIX = ".kf"
KERNEL_LANGUAGES = {"cpp": "cpu", "cuda": "cuda"}  # language -> the backend that builds it
KERNEL_OPTIONS = ("entry",)


def load_task(path: Path) -> Task:
    """Load a task from a KernelBench .py file, a task folder, its task.yaml, or a .kf file."""
    path = Path(path)
    if not path.exists():
        raise TaskError("not_found", f"no task at {path}")
    if path.is_dir():
        return _load_folder(path)
    if path.name == TASK_CONFIG_FILE:
        return _load_folder(path.parent)
    if path.suffix == ".py":
        return load_task_from_source(_read(path), name=path.stem, origin=str(path))
    if path.suffix == SECTIONS_SUFFIX:
        return load_task_from_source(_read(path), name=path.stem, origin=str(path))
    raise TaskError(
        "bad_config",
        f"{path}: not a task (expected a KernelBench .py file, a task folder or a {SECTIONS_SUFFIX} file)",
    )


def load_task_from_source(
    source: str, name: str, *, config_text: str | None = None, origin: str | None = None
) -> Task:
    """Load a task handed over as text: KernelBench Python, or task.kf text with marked sections.

    `config_text` (task.yaml content) may come separately; giving a configuration twice is an error.
    """
    origin = origin or f"<task {name}>"
    if not has_sections(source):
        config = (
            parse_config_text(config_text, f"{origin} (config)") if config_text is not None else TaskConfig()
        )
        return _assemble(name, source, "", (), config, origin, reference_line=1)
    return _from_sections(split_sections(source, origin), name, config_text, origin)


def _load_folder(folder: Path) -> Task:
    config_path = folder / TASK_CONFIG_FILE
    sections_path = folder / TASK_SECTIONS_FILE
    for required in (config_path, sections_path):
        if not required.is_file():
            raise TaskError("not_found", f"task folder {folder} has no {required.name}")
    sections = split_sections(_read(sections_path), str(sections_path))
    return _from_sections(sections, folder.name, _read(config_path), str(sections_path), str(config_path))


def _from_sections(
    sections: list[Section], name: str, config_text: str | None, origin: str, config_origin: str | None = None
) -> Task:
    by_kind: dict[str, Section] = {}
    for section in sections:
        if section.kind in ("config", "reference", "instructions"):
            if section.kind in by_kind:
                raise TaskError(
                    "bad_config",
                    f"{origin}:{section.line}: second `{section.kind}` section "
                    f"(the first is at line {by_kind[section.kind].line})",
                )
            by_kind[section.kind] = section
    if "config" in by_kind:
        if config_text is not None:
            raise TaskError(
                "bad_config",
                f"{origin}:{by_kind['config'].line}: a `config` section and a separate {TASK_CONFIG_FILE} "
                "both configure this task; keep one",
            )
        config_text, config_origin = by_kind["config"].body, f"{origin} (config section)"
    config = (
        parse_config_text(config_text, config_origin or f"{origin} (config)")
        if config_text is not None
        else TaskConfig()
    )
    reference = by_kind.get("reference")
    if reference is None:
        raise TaskError("bad_config", f"{origin}: no `# kf:section reference` section")
    instructions = by_kind["instructions"].body.strip() if "instructions" in by_kind else ""
    kernels = _initial_kernels(sections, config, origin)
    return _assemble(
        name, reference.body, instructions, kernels, config, origin, reference_line=reference.line + 1
    )


def _initial_kernels(sections: list[Section], config: TaskConfig, origin: str) -> tuple[KernelSource, ...]:
    kernels: list[KernelSource] = []
    previous: Section | None = None
    target_backends = {target.partition(".")[0] for target in config.targets}
    for section in sections:
        where = f"{origin}:{section.line}"
        if section.kind == "kernel":
            if len(section.arguments) != 1 or section.arguments[0] not in KERNEL_LANGUAGES:
                raise TaskError(
                    "bad_config",
                    f"{where}: a kernel section names one language ({', '.join(KERNEL_LANGUAGES)}), "
                    f"got {' '.join(section.arguments) or 'none'}",
                )
            language = section.arguments[0]
            unknown = [key for key in section.options if key not in KERNEL_OPTIONS]
            if unknown:
                raise TaskError("bad_config", f"{where}: unknown kernel option `{unknown[0]}` (known: entry)")
            if not section.body.strip():
                raise TaskError("bad_config", f"{where}: kernel section is empty")
            if KERNEL_LANGUAGES[language] not in target_backends:
                raise TaskError(
                    "bad_config",
                    f"{where}: initial kernel in {language} but the task targets {', '.join(config.targets)}",
                )
            try:
                tunables = parse_tunables(section.body)
            except TunableError as exc:
                raise TaskError("bad_config", f"{where}: kernel section: {exc.message}") from exc
            kernels.append(
                KernelSource(
                    language=language,  # type: ignore[arg-type]  # checked against KERNEL_LANGUAGES
                    code=section.body,
                    entry_point=section.options.get("entry", DEFAULT_ENTRY_POINT),
                    tunables=tunables,
                )
            )
        elif section.kind == "glue":
            if previous is None or previous.kind != "kernel":
                raise TaskError(
                    "bad_config", f"{where}: a `glue` section must follow the kernel section it drives"
                )
            kernels[-1] = replace(kernels[-1], glue=section.body)
        previous = section
    return tuple(kernels)


def _assemble(
    name: str,
    reference: str,
    instructions: str,
    kernels: tuple[KernelSource, ...],
    config: TaskConfig,
    origin: str,
    reference_line: int,
) -> Task:
    outline = outline_reference(reference, f"{origin} (reference from line {reference_line})")
    for shape in config.shapes:
        unknown = sorted(set(shape.overrides) - outline.globals)
        if unknown:
            raise TaskError(
                "bad_shape",
                f"{origin}: shape `{shape.name}` overrides `{unknown[0]}`, "
                "which is not a module-level global of the reference",
            )
    return Task(
        name=config.name or name,
        reference_source=reference,
        instructions=instructions,
        shapes=config.shapes,
        tolerance=config.tolerance,
        seeds=config.seeds,
        targets=config.targets,
        budget=config.budget,
        initial_kernels=kernels,
    )


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise TaskError("bad_config", f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except OSError as exc:
        raise TaskError("not_found", f"{path}: cannot be read: {exc.strerror}") from exc
