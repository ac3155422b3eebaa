"""Tunable declarations: the one grammar, its parser and its writer.

A template kernel declares each tunable parameter on a comment line of its own:

    // @kf.tunable BLOCK_SIZE in [64, 128, 256, 512] default 256

- The line is a `//` comment whose text starts with `@kf.tunable` (indentation and spaces after `//`
  are allowed). A marker after code on the same line is an error, never silently skipped.
- NAME is a C identifier: the build passes the chosen value as `-DNAME=value`.
- The values are a non-empty, comma-separated list without repeats. A value is one token
  (`[A-Za-z0-9_.+-]+`, e.g. `128`, `float4`, `1e-3`), optionally quoted (the quotes are dropped). A
  decimal integer (`-?(0|[1-9][0-9]*)`) becomes an `int`; anything else, `010` and `1_000` included,
  stays the text the build will pass.
- `default VALUE` is optional (the first value otherwise) and must be one of the values.
- Nothing may follow the default; a name may be declared once.

Every malformed declaration raises `TunableError(reason="invalid_tunable")`. The same token rules
decide whether a build may pass a define (`is_define_name`, `is_define_value`), and the same integer
rule decodes a value that travelled as text (`parse_value`).

Pure: no I/O.
"""

from __future__ import annotations

import re

from kernelfoundry.domain.kernel import Tunable, TunableValue

MARKER = "@kf.tunable"

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOKEN = re.compile(r"[A-Za-z0-9_.+\-]+")
_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")
_MARKED = re.compile(r"//\s*@kf\.tunable\b")
_DECLARATION = re.compile(
    r"[ \t]*//[ \t]*@kf\.tunable[ \t]+(?P<name>\S+)[ \t]+in[ \t]*\[(?P<values>[^\]]*)\]"
    r"(?:[ \t]+default[ \t]+(?P<default>\S+))?[ \t]*"
)


class TunableError(ValueError):
    """A tunable declaration that cannot be used; `reason` is a short code."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"


def is_define_name(text: str) -> bool:
    """A C identifier, usable as `-DNAME`."""
    return _NAME.fullmatch(text) is not None


def is_define_value(text: str) -> bool:
    """A single token, usable as `-DNAME=value` without quoting."""
    return _TOKEN.fullmatch(text) is not None


def parse_value(text: str) -> TunableValue:
    """A value as written (in a declaration or on the wire): a decimal integer, else the text itself."""
    return int(text) if _INTEGER.fullmatch(text) else text


def value_text(value: TunableValue) -> str:
    """The text a value is written as; `parse_value(value_text(v)) == v` for every parsed value."""
    return str(value)


def _invalid(message: str) -> TunableError:
    return TunableError("invalid_tunable", message)


def _token(text: str, where: str) -> TunableValue:
    text = text.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1]
    if not is_define_value(text):
        raise _invalid(f"{where}: value {text!r} is not a single token ([A-Za-z0-9_.+-])")
    return parse_value(text)


def _declaration(line: str) -> Tunable:
    shown = line.strip()
    m = _DECLARATION.fullmatch(line)
    if m is None:
        if not line.lstrip().startswith("//"):
            raise _invalid(f"a tunable declaration must be a comment line of its own: {shown!r}")
        raise _invalid(f"cannot parse tunable declaration (NAME in [a, b] default a): {shown!r}")
    name = m["name"]
    if not is_define_name(name):
        raise _invalid(f"tunable name {name!r} is not a C identifier")
    items = m["values"].split(",")
    if not m["values"].strip():
        raise _invalid(f"tunable {name} declares no values")
    if any(not item.strip() for item in items):
        raise _invalid(f"tunable {name} has an empty value: [{m['values']}]")
    values = tuple(_token(item, f"tunable {name}") for item in items)
    if len(set(values)) != len(values):
        raise _invalid(f"tunable {name} repeats a value: {list(values)}")
    default = _token(m["default"], f"tunable {name} default") if m["default"] is not None else values[0]
    if default not in values:
        raise _invalid(f"tunable {name} default {default!r} not in {list(values)}")
    return Tunable(name, values, default)


def parse_tunables(code: str) -> tuple[Tunable, ...]:
    """Every tunable declared in `code`, in order of appearance."""
    tunables: list[Tunable] = []
    for line in code.splitlines():
        if _MARKED.search(line) is None:
            continue
        tunable = _declaration(line)
        if any(t.name == tunable.name for t in tunables):
            raise _invalid(f"tunable {tunable.name} declared twice")
        tunables.append(tunable)
    return tuple(tunables)


def declaration(tunable: Tunable) -> str:
    """The comment line that declares `tunable`; `parse_tunables` reads it back unchanged."""
    values = ", ".join(value_text(v) for v in tunable.values)
    return f"// {MARKER} {tunable.name} in [{values}] default {value_text(tunable.default)}"
