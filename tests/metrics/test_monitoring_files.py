"""``monitoring/``: promtool accepts the scrape config and rules, the rules' unit tests pass, and every metric the
rules and the Grafana dashboard use is one that ``MetricsObserver`` exports."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import pytest
import yaml

from sbrs.metrics import MetricsObserver

from .prom import MONITORING, requires_promtool

METRIC_NAME = re.compile(r"\b((?:sbrs|process)_[a-z0-9_]+)\b")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["promtool", *args], cwd=MONITORING, capture_output=True, text=True, timeout=60,
                          check=False)


@requires_promtool
def test_promtool_check_config() -> None:
    result = promtool("check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr


@requires_promtool
def test_promtool_check_rules() -> None:
    result = promtool("check", "rules", "alerts.yml")
    assert result.returncode == 0, result.stdout + result.stderr


@requires_promtool
def test_promtool_rule_unit_tests() -> None:
    result = promtool("test", "rules", "alerts.test.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def exported_names() -> set[str]:
    """Every sample name the observer exports once each kind of event happened."""
    observer = MetricsObserver(("a", "b"), high_power=("a",))
    observer.started("a", {"arena_bytes": 1})
    observer.frame_done("a", 0.01)
    observer.switch_done("a", "b", 0.01)
    observer.request_handled("switch", "accepted")
    return {sample.name for metric in observer.registry.collect() for sample in metric.samples}


def dashboard() -> dict[str, Any]:
    return json.loads((MONITORING / "grafana-dashboard.json").read_text())


def test_rules_use_exported_metrics_and_required_alerts_exist() -> None:
    rules = [rule for group in yaml.safe_load((MONITORING / "alerts.yml").read_text())["groups"]
             for rule in group["rules"]]
    names = exported_names()
    for rule in rules:
        used = set(METRIC_NAME.findall(rule["expr"]))
        assert used <= names, f"{rule['alert']}: unknown metrics {used - names}"
    alerts = {rule["alert"]: rule["expr"] for rule in rules}
    assert "sbrs_frames_total" in alerts["SbrsNoFramesProcessed"]
    assert {"sbrs_environment_battery_ratio", "sbrs_scenario_high_power", "sbrs_active_scenario"} <= set(
        METRIC_NAME.findall(alerts["SbrsHighPowerScenarioOnLowBattery"]))
    assert "sbrs_switch_response_delay_seconds" in alerts["SbrsSlowScenarioSwitch"]


def test_dashboard_panels_use_exported_metrics() -> None:
    board = dashboard()
    names = exported_names()
    exprs = [target["expr"] for panel in board["panels"] for target in panel.get("targets", [])]
    assert len(exprs) >= 10
    for expr in exprs:
        used = set(METRIC_NAME.findall(expr))
        assert used and used <= names, f"{expr}: unknown metrics {used - names}"
    text = json.dumps(board)
    for needed in ("sbrs_active_scenario", "sbrs_frames_total", "sbrs_inference_seconds_bucket",
                   "sbrs_switch_response_delay_seconds_bucket", "sbrs_arena_bytes", "sbrs_parameters_bytes"):
        assert needed in text, needed


def test_dashboard_is_importable_json() -> None:
    board = dashboard()
    assert board["uid"] and board["title"] and board["schemaVersion"] >= 30
    ids = [panel["id"] for panel in board["panels"]]
    assert len(ids) == len(set(ids))
    variables = {variable["name"] for variable in board["templating"]["list"]}
    assert {"datasource", "instance"} <= variables
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}"


@pytest.mark.parametrize("name", ["prometheus.yml", "alerts.yml", "alerts.test.yml"])
def test_yaml_files_parse(name: str) -> None:
    assert yaml.safe_load((MONITORING / name).read_text())
