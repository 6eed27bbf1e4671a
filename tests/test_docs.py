"""The front page and the reference pages stay true: README.md is at most 120 lines and keeps its two set-up
commands, every link of it and of docs/ leads to a file, every command-line option is in docs/CLI.md and every
field of the app file in docs/APP_YAML.md."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from sbrs.app.schema import (
    AppEntry,
    EnvironmentEntry,
    HysteresisEntry,
    MetricsEntry,
    PolicyEntry,
    QuantizeEntry,
    RuntimeEntry,
    ScenarioEntry,
    TemperatureThresholdEntry,
)
from sbrs.cli import build_parser
from tests.conftest import REPO

README = REPO / "README.md"
DOCS = REPO / "docs"
SET_UP = ('python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/sbrs run apps/drone.yaml --frames 20',
          'python3 -m venv .venv && .venv/bin/pip install -e ".[dev]" && .venv/bin/python -m pytest -q')


def test_the_front_page_is_short_and_keeps_its_set_up_commands() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 120
    for command in SET_UP:
        assert command in text.splitlines()


@pytest.mark.parametrize("page", [README, *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name)
def test_every_local_link_leads_to_a_file(page: Path) -> None:
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
        if not target.startswith(("http://", "https://")):
            assert (page.parent / target).exists(), f"{page.name}: {target}"


def _options(parser: argparse.ArgumentParser, path: str = "") -> set[tuple[str, str]]:
    """(command, option) for every long option of every subcommand."""
    found = set()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= _options(sub, f"{path} {name}".strip())
        else:
            found |= {(path, s) for s in action.option_strings if s.startswith("--") and s != "--help"}
    return found


def test_every_command_line_option_is_documented() -> None:
    text = (DOCS / "CLI.md").read_text(encoding="utf-8")
    missing = sorted(f"sbrs {command} {option}" for command, option in _options(build_parser())
                     if option not in text and option not in ("--verbose", "--quiet", "--version"))
    assert missing == []


def test_every_app_file_field_is_documented() -> None:
    text = (DOCS / "APP_YAML.md").read_text(encoding="utf-8")
    # a field's key in the file is its alias where it has one (``from``, a Python keyword, is the field ``from_``)
    fields = {info.alias or name for entry in (AppEntry, ScenarioEntry, QuantizeEntry, RuntimeEntry, PolicyEntry,
                                               MetricsEntry, EnvironmentEntry, TemperatureThresholdEntry,
                                               HysteresisEntry) for name, info in entry.model_fields.items()}
    assert sorted(f for f in fields if not any(form.format(f) in text for form in ("`{}`", ".{}`", "`{}."))) == []
