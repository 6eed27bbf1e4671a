"""Error types shared by every stage.

Two families reach the user, and the CLI maps them to exit codes (DESIGN.md, "Interfaces"):

- ``InputError`` (exit 2): the user's input is at fault (a file, a YAML field, a model, a request).
  Its message is one line naming the file, line where known, and field.
- ``SbrsRuntimeError`` (exit 1): something failed while doing valid work.
"""

from __future__ import annotations


class SbrsError(Exception):
    """Base class of every error sbrs reports to its user as one line."""

    exit_code = 1


class InputError(SbrsError):
    """Bad input: a file, field, model or request the user must fix. CLI exit status 2."""

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        self.file = file
        self.line = line
        self.field = field
        self.detail = message
        super().__init__(format_location(file, line, field, message))


class SbrsRuntimeError(SbrsError):
    """A failure while executing valid work (CLI exit status 1)."""

    exit_code = 1


def format_location(file: str | None, line: int | None, field: str | None, message: str) -> str:
    """``file:line: field: message`` with the parts that are known, always on one line."""
    where = ""
    if file:
        where = f"{file}:{line}: " if line else f"{file}: "
    prefix = f"{where}{field}: " if field else where
    return " ".join(f"{prefix}{message}".split())
