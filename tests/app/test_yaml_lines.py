"""YAML loading with lines (sbrs/app/yaml_lines.py): values YAML writes in more than one way, and one-line errors
naming the line and field for values no YAML type takes."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbrs.app.yaml_lines import load_yaml
from sbrs.cli import main
from tests.conftest import assert_one_line_error

APP = """\
name: empty-values
input: {name: input, shape: [1, 3, 8, 8], dtype: float32}
initial:
scenarios:
  - name: only
    layers: [{op: conv, out: 4, kernel: 3, pad: 1, act: relu}]
memory_limit_mb:
source:
"""


def test_a_key_with_nothing_after_it_is_null(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``initial:`` with no value is null, as ``initial: ~`` is: the default. It was re-parsed alone, found no
    document, and failed with no line: "invalid YAML value: while parsing a block node ... line 1, column 1"."""
    path = tmp_path / "app.yaml"
    path.write_text(APP)
    data = load_yaml(path).data
    assert (data["initial"], data["memory_limit_mb"], data["source"]) == (None, None, None)
    assert main(["check", str(path)]) == 0, capsys.readouterr().err


def test_an_empty_section_names_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(APP + "policy:\n")
    assert main(["check", str(path)]) == 2
    assert_one_line_error(capsys.readouterr().err, "policy: Input should be a valid dictionary", 9)


@pytest.mark.parametrize(("value", "fragment"), [
    ("!!int x", "name: invalid YAML value 'x' for the tag tag:yaml.org,2002:int"),
    ("!!float x", "name: invalid YAML value 'x' for the tag tag:yaml.org,2002:float"),
    ("!!bool maybe", "name: invalid YAML value 'maybe' for the tag tag:yaml.org,2002:bool"),
    ("!!timestamp x", "name: invalid YAML value 'x' for the tag tag:yaml.org,2002:timestamp"),
    ("!unknown x", "name: invalid YAML value 'x' for the tag !unknown"),
])
def test_a_value_its_tag_does_not_take_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str,
                                                   fragment: str) -> None:
    """These were internal errors (exit 1: ValueError, KeyError, AttributeError from YAML's constructors)."""
    path = tmp_path / "app.yaml"
    path.write_text(APP.replace("name: empty-values", f"name: {value}"))
    assert main(["check", str(path)]) == 2
    assert_one_line_error(capsys.readouterr().err, fragment, 1)


def test_a_merge_key_is_refused_on_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(APP.replace("  - name: only\n", "  - name: only\n    requirements: {<<: {accuracy: 1.0}}\n"))
    assert main(["check", str(path)]) == 2
    assert_one_line_error(capsys.readouterr().err, "scenarios[0].requirements: merge keys", 6)
