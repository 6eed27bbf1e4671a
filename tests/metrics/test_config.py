"""The app file's ``metrics:`` section: defaults, overrides, and one-line errors naming file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbrs.app.config import MetricsConfig, is_loopback_host, load_app_config
from sbrs.errors import InputError

from .prom import REPO

TINY = (REPO / "apps" / "tiny.yaml").read_text()


def app_with(tmp_path: Path, section: str) -> Path:
    """tiny.yaml plus ``section`` appended (its scenarios use the inline layer language: no model files)."""
    path = tmp_path / "app.yaml"
    path.write_text(TINY + section)
    return path


def test_defaults_when_the_section_is_absent(tmp_path: Path) -> None:
    config = load_app_config(app_with(tmp_path, ""))
    assert config.metrics == MetricsConfig(port=None, address="127.0.0.1", allow_remote=False)
    assert config.to_dict()["metrics"] == {"port": None, "address": "127.0.0.1", "allow_remote": False}


def test_a_full_section(tmp_path: Path) -> None:
    config = load_app_config(app_with(tmp_path, "metrics: {port: 9500, address: '::1'}\n"))
    assert config.metrics == MetricsConfig(port=9500, address="::1", allow_remote=False)
    config = load_app_config(app_with(tmp_path, "metrics:\n  port: 9464\n  address: 0.0.0.0\n  allow_remote: true\n"))
    assert config.metrics == MetricsConfig(port=9464, address="0.0.0.0", allow_remote=True)
    config = load_app_config(app_with(tmp_path, "metrics: {port: null}\n"))
    assert config.metrics.port is None


@pytest.mark.parametrize(("section", "field", "message"), [
    ("metrics: {port: '9464'}\n", "metrics.port", "valid integer"),
    ("metrics: {port: 0}\n", "metrics.port", "greater than or equal to 1"),
    ("metrics: {port: 70000}\n", "metrics.port", "less than or equal to 65535"),
    ("metrics: {port: 9464.0}\n", "metrics.port", "valid integer"),
    ("metrics: {port: true}\n", "metrics.port", "valid integer"),
    ("metrics: {address: ''}\n", "metrics.address", "at least 1 character"),
    ("metrics: {address: 7}\n", "metrics.address", "valid string"),
    ("metrics: {allow_remote: 'yes'}\n", "metrics.allow_remote", "valid boolean"),
    ("metrics: {prot: 9464}\n", "metrics.prot", "unknown key (allowed: address, allow_remote, port)"),
    ("metrics: 9464\n", "metrics", "valid dictionary"),
    ("metrics:\n  port: 9464\n  address: 0.0.0.0\n", "metrics.address",
     "'0.0.0.0' is not a loopback address; set metrics.allow_remote: true"),
    ("metrics: {address: 192.168.1.20, allow_remote: false}\n", "metrics.address", "not a loopback address"),
    ("metrics: {address: device.local}\n", "metrics.address", "not a loopback address"),
])
def test_bad_sections_are_one_line_naming_file_line_and_field(tmp_path: Path, section: str, field: str,
                                                              message: str) -> None:
    path = app_with(tmp_path, section)
    with pytest.raises(InputError) as info:
        load_app_config(path)
    text = str(info.value)
    assert "\n" not in text and info.value.exit_code == 2
    assert info.value.field == field and message in text, text
    assert text.startswith(f"{path}:") and info.value.line is not None
    assert info.value.line >= TINY.count("\n") + 1  # the line of the metrics section, not line 1


@pytest.mark.parametrize(("host", "loopback"), [
    ("127.0.0.1", True), ("127.1.2.3", True), ("::1", True), ("[::1]", True), ("localhost", True),
    ("LOCALHOST", True), ("0.0.0.0", False), ("::", False), ("10.0.0.1", False), ("example.com", False),
    ("", False), ("127.0.0.1.example.com", False),
])
def test_is_loopback_host(host: str, loopback: bool) -> None:
    assert is_loopback_host(host) is loopback
