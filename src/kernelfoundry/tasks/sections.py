"""Splitting a sectioned task file (`task.kf`) into its marked sections.

A marker is a line of its own, starting at column 0:

    # kf:section <kind> [argument ...] [key=value ...]

Kinds: `config` (YAML, the task.yaml keys), `reference` (KernelBench-style Python), `instructions`
(free text for the generator), `kernel <language>` (an initial kernel; option `entry=<symbol>`),
`glue` (Python glue of the kernel section right before it). Everything between two markers is the
body of the first one. Before the first marker only blank lines and `#` comments may appear.
Pure text processing: this module never executes or imports what it splits.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from kernelfoundry.tasks.model import TaskError

SECTION_KINDS = ("config", "reference", "instructions", "kernel", "glue")
_MARKER = re.compile(r"^# kf:section\b(.*)$")


@dataclass(frozen=True)
class Section:
    kind: str
    line: int  # 1-based line number of the marker
    body: str
    arguments: tuple[str, ...] = ()
    options: Mapping[str, str] = field(default_factory=dict)


def has_sections(text: str) -> bool:
    return any(_MARKER.match(line) for line in text.splitlines())


def split_sections(text: str, origin: str) -> list[Section]:
    """Sections in file order; raises TaskError(bad_config) naming the line of a malformed marker."""
    sections: list[Section] = []
    header: tuple[str, int, tuple[str, ...], dict[str, str]] | None = None
    body: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = _MARKER.match(line)
        if match is None:
            if header is None and line.strip() and not line.lstrip().startswith("#"):
                raise TaskError(
                    "bad_config",
                    f"{origin}:{number}: text before the first `# kf:section` marker: {line.strip()[:60]!r}",
                )
            body.append(line)
            continue
        if header is not None:
            sections.append(_section(header, body))
        header = _parse_marker(match.group(1), number, origin)
        body = []
    if header is not None:
        sections.append(_section(header, body))
    return sections


def _parse_marker(rest: str, number: int, origin: str) -> tuple[str, int, tuple[str, ...], dict[str, str]]:
    words = rest.split()
    if not words:
        raise TaskError(
            "bad_config", f"{origin}:{number}: section marker names no kind ({', '.join(SECTION_KINDS)})"
        )
    kind, arguments, options = words[0], [], {}
    if kind not in SECTION_KINDS:
        raise TaskError(
            "bad_config",
            f"{origin}:{number}: unknown section kind `{kind}` (known: {', '.join(SECTION_KINDS)})",
        )
    for word in words[1:]:
        key, eq, value = word.partition("=")
        if eq:
            if not key or not value:
                raise TaskError("bad_config", f"{origin}:{number}: malformed section option `{word}`")
            options[key] = value
        else:
            arguments.append(word)
    return kind, number, tuple(arguments), options


def _section(header: tuple[str, int, tuple[str, ...], dict[str, str]], body: list[str]) -> Section:
    kind, line, arguments, options = header
    while body and not body[0].strip():
        body.pop(0)
    while body and not body[-1].strip():
        body.pop()
    text = "\n".join(body) + ("\n" if body else "")
    return Section(kind=kind, line=line, body=text, arguments=arguments, options=options)
