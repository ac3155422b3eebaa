"""The task configuration (task.yaml, or the `config` section of a task.kf): parsed and checked.

Keys: name, targets, shapes, tolerance, seeds, budget (see docs/tasks.md). Every mistake raises
TaskError(bad_config | bad_shape) naming the key at fault; unknown keys are mistakes, not ignored.
Pure: reads YAML text, never touches the reference source.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from kernelfoundry.tasks.model import (
    DEFAULT_SEEDS,
    DEFAULT_SHAPES,
    Budget,
    ShapeVariant,
    TaskError,
    Tolerance,
)
from kernelfoundry.toolchains.target import BACKENDS, BuildTarget

TOP_LEVEL_KEYS = ("name", "targets", "shapes", "tolerance", "seeds", "budget")
SHAPE_KEYS = ("name", "overrides")
BUDGET_KEYS = ("iterations", "wall_time_s", "evaluations", "patience")
DEFAULT_TARGETS = ("cpu",)
_SHAPE_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")


@dataclass(frozen=True)
class TaskConfig:
    name: str | None = None
    targets: tuple[str, ...] = DEFAULT_TARGETS
    shapes: tuple[ShapeVariant, ...] = DEFAULT_SHAPES
    tolerance: Tolerance | None = None
    seeds: int = DEFAULT_SEEDS
    budget: Budget = field(default_factory=Budget)


def parse_config_text(text: str, origin: str) -> TaskConfig:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TaskError("bad_config", f"{origin}: not valid YAML: {exc}") from exc
    return parse_config(data if data is not None else {}, origin)


def parse_config(data: Any, origin: str) -> TaskConfig:
    if not isinstance(data, Mapping):
        raise TaskError("bad_config", f"{origin}: the configuration must be a mapping of keys to values")
    _reject_unknown(data, TOP_LEVEL_KEYS, origin, "")
    name = data.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise TaskError("bad_config", f"{origin}: `name` must be a non-empty string")
    return TaskConfig(
        name=name,
        targets=_targets(data.get("targets", list(DEFAULT_TARGETS)), origin),
        shapes=_shapes(data["shapes"], origin) if "shapes" in data else DEFAULT_SHAPES,
        tolerance=_tolerance(data["tolerance"], origin) if data.get("tolerance") is not None else None,
        seeds=_integer(data.get("seeds", DEFAULT_SEEDS), "seeds", origin),
        budget=_budget(data.get("budget") or {}, origin),
    )


def _reject_unknown(data: Mapping[str, Any], known: tuple[str, ...], origin: str, prefix: str) -> None:
    for key in data:
        if key not in known:
            raise TaskError(
                "bad_config",
                f"{origin}: unknown key `{prefix}{key}` (known: {', '.join(prefix + k for k in known)})",
            )


def _targets(value: Any, origin: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not value:
        raise TaskError("bad_config", f"{origin}: `targets` must be a non-empty list such as [cpu, cuda]")
    targets: list[str] = []
    for item in value:
        if not isinstance(item, str):
            raise TaskError("bad_config", f"{origin}: `targets` entry {item!r} is not a string")
        try:
            if "." in item:
                BuildTarget.parse(item)
            elif item not in BACKENDS:
                raise ValueError(f"unknown backend `{item}` (known: {', '.join(BACKENDS)})")
        except ValueError as exc:
            raise TaskError("bad_config", f"{origin}: `targets`: {exc}") from exc
        if item not in targets:
            targets.append(item)
    return tuple(targets)


def _shapes(value: Any, origin: str) -> tuple[ShapeVariant, ...]:
    if not isinstance(value, list) or not value:
        raise TaskError("bad_shape", f"{origin}: `shapes` must be a non-empty list of {{name, overrides}}")
    shapes: list[ShapeVariant] = []
    for index, entry in enumerate(value):
        where = f"shapes[{index}]"
        if not isinstance(entry, Mapping):
            raise TaskError("bad_shape", f"{origin}: `{where}` must be a mapping with `name` and `overrides`")
        _reject_unknown(entry, SHAPE_KEYS, origin, f"{where}.")
        name = entry.get("name")
        if not isinstance(name, str) or not _SHAPE_NAME.match(name):
            raise TaskError(
                "bad_shape", f"{origin}: `{where}.name` must be a word ([A-Za-z0-9_.-]), got {name!r}"
            )
        if any(shape.name == name for shape in shapes):
            raise TaskError("bad_shape", f"{origin}: shape name `{name}` is used twice")
        overrides = entry.get("overrides") or {}
        if not isinstance(overrides, Mapping):
            raise TaskError("bad_shape", f"{origin}: `{where}.overrides` must map global names to values")
        for key, item in overrides.items():
            if not isinstance(key, str) or not key.isidentifier():
                raise TaskError(
                    "bad_shape", f"{origin}: `{where}.overrides` key {key!r} is not a Python name"
                )
            if not _plain_value(item):
                raise TaskError(
                    "bad_shape",
                    f"{origin}: `{where}.overrides.{key}` must be a number, string, bool or list of them",
                )
        shapes.append(ShapeVariant(name=name, overrides=dict(overrides)))
    return tuple(shapes)


def _plain_value(value: Any) -> bool:
    if isinstance(value, list):
        return all(_plain_value(item) for item in value)
    return isinstance(value, int | float | str | bool)


def _tolerance(value: Any, origin: str) -> Tolerance:
    if not isinstance(value, Mapping):
        raise TaskError("bad_config", f"{origin}: `tolerance` must be a mapping {{atol, rtol}}")
    _reject_unknown(value, ("atol", "rtol"), origin, "tolerance.")
    bounds = {}
    for key in ("atol", "rtol"):
        if key not in value:
            raise TaskError("bad_config", f"{origin}: `tolerance.{key}` is missing (give both atol and rtol)")
        bounds[key] = _non_negative_float(value[key], f"tolerance.{key}", origin)
    return Tolerance(**bounds)


def _budget(value: Any, origin: str) -> Budget:
    if not isinstance(value, Mapping):
        raise TaskError("bad_config", f"{origin}: `budget` must be a mapping")
    _reject_unknown(value, BUDGET_KEYS, origin, "budget.")
    fields: dict[str, Any] = {}
    for key in ("iterations", "evaluations", "patience"):
        if value.get(key) is not None:
            fields[key] = _integer(value[key], f"budget.{key}", origin)
    if value.get("wall_time_s") is not None:
        seconds = _non_negative_float(value["wall_time_s"], "budget.wall_time_s", origin)
        if seconds == 0:
            raise TaskError("bad_config", f"{origin}: `budget.wall_time_s` must be positive")
        fields["wall_time_s"] = seconds
    return Budget(**fields)


def _integer(value: Any, key: str, origin: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TaskError("bad_config", f"{origin}: `{key}` must be a positive integer, got {value!r}")
    return value


def _non_negative_float(value: Any, key: str, origin: str) -> float:
    # YAML 1.1 reads `1e-4` (no dot) as a string; accept any numeric spelling.
    try:
        number = float(value) if not isinstance(value, bool) else math.nan
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number < 0:
        raise TaskError("bad_config", f"{origin}: `{key}` must be a non-negative number, got {value!r}")
    return number
