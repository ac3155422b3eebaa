"""Records to plain documents and back: the one mapping both backends and the export file share.

A document is a dict of JSON/BSON-friendly values: descriptors become {memory, algorithm, parallelism},
tuples become lists, datetimes stay datetimes (`to_json` writes them as ISO-8601 UTC strings).
Unknown keys (`_id`, `schema_version`, backend-side denormalised fields) are ignored when decoding, so an
older reader tolerates fields a newer writer added. Must never import a database driver.
"""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from functools import cache
from typing import Any, TypeVar

from kernelfoundry.domain.descriptors import AXES, Descriptors
from kernelfoundry.lineage.errors import LineageError

R = TypeVar("R")


@cache
def _field_kinds(cls: type) -> dict[str, str]:
    kinds: dict[str, str] = {}
    for f in dataclasses.fields(cls):
        annotation = str(f.type)
        if "datetime" in annotation:
            kinds[f.name] = "datetime"
        elif "Descriptors" in annotation:
            kinds[f.name] = "descriptors"
        else:
            kinds[f.name] = "plain"
    return kinds


def to_document(record: object) -> dict[str, Any]:
    """The record as a plain dict (field name -> value)."""
    document: dict[str, Any] = {}
    for name, kind in _field_kinds(type(record)).items():
        value = getattr(record, name)
        if kind == "descriptors" and value is not None:
            value = {axis: getattr(value, axis) for axis in AXES}
        elif isinstance(value, tuple):
            value = list(value)
        elif isinstance(value, dict):
            value = dict(value)
        document[name] = value
    return document


def parse_datetime(value: datetime | str) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value


def from_document(cls: type[R], document: dict[str, Any]) -> R:
    """The record of type `cls` that `document` holds; raises LineageError(invalid_record) if it cannot."""
    values: dict[str, Any] = {}
    for name, kind in _field_kinds(cls).items():
        if name not in document:
            continue
        value = document[name]
        if value is not None and kind == "datetime":
            value = parse_datetime(value)
        elif value is not None and kind == "descriptors":
            value = Descriptors.from_levels(value, missing=0)  # an axis added later reads as level 0
        values[name] = value
    try:
        return cls(**values)
    except TypeError as exc:
        raise LineageError("invalid_record", f"document is not a {cls.__name__}: {exc}") from exc


def _json_default(value: object) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def to_json(document: dict[str, Any]) -> str:
    """One line of JSON; datetimes as ISO-8601 strings with their UTC offset."""
    return json.dumps(document, default=_json_default, ensure_ascii=False, separators=(",", ":"))


def from_json(text: str) -> dict[str, Any]:
    return json.loads(text)
