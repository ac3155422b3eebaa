"""Where the command line writes, and how it reports a mistake: one place for both.

Tables go to stdout through `stdout_console()`: as wide as the terminal, and never cut at 80 columns when
stdout is a pipe or a file (rich would otherwise assume 80). Progress and notes go to stderr. A user's
mistake ends in `CliError` (a reason code and a message naming the thing that was wrong); with `--json` it
is printed as one JSON document on stdout, else as one line on stderr, and the command exits with the
error's code. Never a traceback.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import TextIO

import typer
from rich.console import Console

PIPED_WIDTH = 400  # wide enough for any table this tool prints; rich pads nothing beyond a table's width


def stdout_console(stream: TextIO | None = None) -> Console:
    """A console for results: the terminal's width, or PIPED_WIDTH when writing to a pipe or a file."""
    out = stream or sys.stdout
    width = None if out.isatty() else PIPED_WIDTH
    return Console(file=out, width=width, soft_wrap=width is not None)


def stderr_console() -> Console:
    return Console(stderr=True)


@dataclass(frozen=True)
class CliError(Exception):
    """A mistake the user can fix: reason code, message naming the thing, exit code."""

    reason: str
    message: str
    exit_code: int = 2

    def __str__(self) -> str:
        return f"{self.reason}: {self.message}"

    def document(self) -> dict[str, object]:
        return {"error": {"reason": self.reason, "message": self.message}}


def fail(error: CliError, json_output: bool) -> typer.Exit:
    """Print `error` the way the command was asked to print (JSON on stdout, or a line on stderr)."""
    if json_output:
        sys.stdout.write(json.dumps(error.document(), indent=2) + "\n")
    else:
        Console(stderr=True, soft_wrap=True, highlight=False).print(
            f"[red]error[/red] ({error.reason}): ", end=""
        )
        Console(stderr=True, soft_wrap=True, highlight=False).print(error.message, markup=False)
    return typer.Exit(error.exit_code)


def rejection(details: str) -> CliError:
    """A server's INVALID_ARGUMENT text, `reason: message`, as a CliError (reason `task_rejected` if bare)."""
    reason, sep, message = details.partition(": ")
    if sep and reason and reason.replace("_", "").isalnum() and " " not in reason:
        return CliError(reason, message)
    return CliError("task_rejected", details)
