"""The adversarial suite's catalogue: attack fixtures, their headers, and how to build and request them.

Every fixture under tests/fixtures/attacks/ opens with a header the suite reads:

    // expect: <reason>      (`ok` for honest controls and for attacks that must stay harmless;
                             `a | b` where the memory layout decides which of two refusals it meets)
    // class: <attack class of issue 12>
    // checked: judge | runner | sandbox | -
    // attack: <what it does>  (may continue on following `//` lines)
    // task: <name>          (optional; tasks/<name>.py, default fused_mul_add)
    // unit: <name>          (glue only: the cpu/ unit it launches)

Glue fixtures use `#` instead of `//`. `@PORT@` in a unit is replaced by a port the test listens on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from kernelfoundry.domain.kernel import KernelSource
from kernelfoundry.evaluation import EvaluationRequest, EvaluationSettings
from kernelfoundry.tasks.model import ShapeVariant, Task
from kernelfoundry.toolchains import BuildCache, BuildTarget, build

ATTACKS = Path(__file__).resolve().parents[1] / "fixtures" / "attacks"
FAST = EvaluationSettings(
    warmup_runs=1, timed_runs=12, deadline_s=60.0, cpu_threads=2, measure_baselines=False
)
WITH_BASELINE = replace(FAST, measure_baselines=True)
SHORT_DEADLINE = replace(FAST, deadline_s=5.0)


@dataclass(frozen=True)
class Attack:
    name: str
    path: Path
    expect: str
    attack_class: str
    checked: str
    description: str
    task: str = "fused_mul_add"
    unit: str = ""  # glue fixtures: the unit they launch
    also: tuple[str, ...] = ()  # other reasons the layout may give (an input's read-only page, say)

    @property
    def accepted(self) -> tuple[str, ...]:
        return (self.expect, *self.also)

    @property
    def is_glue(self) -> bool:
        return self.path.suffix == ".py"


def read_attack(path: Path) -> Attack:
    """The fixture's header as an Attack."""
    marker = "#" if path.suffix == ".py" else "//"
    fields: dict[str, str] = {}
    last = ""
    for line in path.read_text().splitlines():
        if not line.startswith(marker):
            break
        text = line[len(marker) :].strip()
        key, sep, value = text.partition(":")
        if sep and key in {"expect", "class", "checked", "attack", "task", "unit"}:
            fields[key] = value.strip()
            last = key
        elif last == "attack":
            fields["attack"] += " " + text
    expected = [reason.split()[0] for reason in fields["expect"].split("|")]
    return Attack(
        name=path.stem,
        path=path,
        expect=expected[0],
        also=tuple(expected[1:]),
        attack_class=fields["class"],
        checked=fields["checked"],
        description=fields["attack"],
        task=fields.get("task", "fused_mul_add"),
        unit=fields.get("unit", ""),
    )


def catalogue(folder: str) -> list[Attack]:
    """Every fixture of tests/fixtures/attacks/<folder>, in name order."""
    suffix = {"cpu": "*.cpp", "cuda": "*.cu", "glue": "*.py"}[folder]
    return [read_attack(p) for p in sorted((ATTACKS / folder).glob(suffix))]


def task(name: str) -> Task:
    source = (ATTACKS / "tasks" / f"{name}.py").read_text()
    return Task(name=name, reference_source=source, shapes=(ShapeVariant("default"),))


class Arsenal:
    """Builds attack units once per session (real g++ / nvcc) and turns attacks into requests."""

    def __init__(self, cache: BuildCache, substitutions: dict[str, str]) -> None:
        self.cache = cache
        self.substitutions = substitutions

    def unit_source(self, path: Path, language: str, glue: str = "") -> KernelSource:
        text = path.read_text()
        for placeholder, value in self.substitutions.items():
            text = text.replace(placeholder, value)
        return KernelSource(language, text, glue=glue)

    def request(self, attack: Attack, settings: EvaluationSettings = FAST) -> EvaluationRequest:
        if attack.is_glue:
            unit = read_attack(ATTACKS / "cpu" / f"{attack.unit}.cpp")
            source = self.unit_source(unit.path, "cpp", glue=attack.path.read_text())
            backend, device = "cpu", "cpu"
        elif attack.path.suffix == ".cu":
            source = self.unit_source(attack.path, "cuda")
            backend, device = "cuda", "cuda:0"
        else:
            source = self.unit_source(attack.path, "cpp")
            backend, device = "cpu", "cpu"
        target = BuildTarget("cuda", "sm90") if backend == "cuda" else BuildTarget("cpu", "x86_64")
        result = build(source, target, self.cache)
        assert result.ok and result.artifact is not None, f"{attack.name} does not build:\n{result.log}"
        return EvaluationRequest(task(attack.task), source, result.artifact, device, settings)
