"""Every PromQL expression of ``monitoring/`` checked against a scrape of a running runtime.

The Grafana dashboard's queries and variables and the alert rules may name only what ``sbrs run`` really serves:
each metric they select is in the scrape, with every label they match on, group by, join on, show in a legend
or an annotation; ``rate()``/``increase()`` take counters only (a counter's ``_total``, a histogram's
``_bucket``/``_count``/``_sum``); ``histogram_quantile()`` takes a histogram's ``_bucket`` aggregated by ``le``.
The scrape is the ``/metrics`` endpoint of ``apps/tiny.yaml``'s runtime after frames and a switch, read over
HTTP as Prometheus reads it; the labels Prometheus adds (``job``, ``instance`` and the target labels of
``monitoring/prometheus.yml``) count as present. PromQL is read with regular expressions: enough for the
forms these files use (``sum by (l) (...)``, ``max(...)``, ``histogram_quantile(q, ...)``, joins with
``on``/``group_left``, ``label_replace``); no Prometheus binary is needed.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

import sbrs
from sbrs.app.config import load_app_config
from sbrs.metrics import MetricsObserver, start_metrics_server
from tests.conftest import REPO_BUILDS

from .prom import MONITORING, REPO, http_get

pytestmark = REPO_BUILDS  # runs apps/tiny.yaml, building it inside the repository (tests/conftest.py)

#: Series Prometheus makes itself, with their labels.
SYNTHETIC = {"up": {"job", "instance"}}
#: Labels Prometheus puts on every scraped series.
TARGET_LABELS = {"job", "instance"}
NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
SELECTOR = re.compile(rf"({NAME})\s*\{{([^}}]*)\}}")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
CLAUSE = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
            "offset"}
AGGREGATIONS = "sum|max|min|avg|count|stddev|stdvar|topk|bottomk|quantile|group"
COUNTER_FUNCTIONS = re.compile(rf"\b(rate|irate|increase)\s*\(\s*({NAME})")
LEGEND = re.compile(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}")
ANNOTATION_LABEL = re.compile(r"\$labels\.([a-zA-Z_][a-zA-Z0-9_]*)")


@dataclass
class Scrape:
    """What one scrape of ``/metrics`` holds: sample name → label names, and sample name → its family's type."""

    labels: dict[str, set[str]] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, text: str, target_labels: set[str]) -> Scrape:
        scrape = cls()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                scrape.labels.setdefault(sample.name, set(target_labels)).update(sample.labels)
                scrape.types[sample.name] = family.type
        for name, labels in SYNTHETIC.items():
            scrape.labels[name] = set(labels)
            scrape.types[name] = "gauge"
        return scrape

    def is_counter(self, name: str) -> bool:
        kind = self.types.get(name)
        return kind == "counter" or (kind == "histogram" and name.endswith(("_bucket", "_count", "_sum")))


def prometheus_target_labels() -> set[str]:
    """``job``, ``instance`` and the labels ``monitoring/prometheus.yml`` gives its targets."""
    config = yaml.safe_load((MONITORING / "prometheus.yml").read_text())
    labels = set(TARGET_LABELS)
    for job in config["scrape_configs"]:
        for static in job.get("static_configs", []):
            labels.update(static.get("labels", {}))
    return labels


@pytest.fixture(scope="module")
def scrape() -> Scrape:
    """The ``/metrics`` text of tiny's runtime after frames on two scenarios and a switch, read over HTTP."""
    config = load_app_config(REPO / "apps" / "tiny.yaml")
    observer = MetricsObserver.for_app(config)
    frame = np.zeros(config.input.shape, dtype=config.input.dtype)
    with start_metrics_server(observer.registry, 0) as server, \
            sbrs.runtime_for(REPO / "apps" / "tiny.yaml", observers=[observer]) as runtime:
        runtime.infer(frame)
        runtime.switch("skip")
        runtime.infer(frame)
        runtime.infer(frame)
        status, text = http_get(server.url)
    assert status == 200
    return Scrape.of(text, prometheus_target_labels())


@dataclass(frozen=True)
class Query:
    """One PromQL expression of ``monitoring/``, where it is and the labels its output is shown with."""

    where: str
    expr: str
    shown: frozenset[str] = frozenset()  # legend {{label}}s, or an alert's $labels.label


def dashboard_queries() -> Iterator[Query]:
    board = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            yield Query(f"panel {panel['title']!r} {target['refId']}", target["expr"],
                        frozenset(LEGEND.findall(target.get("legendFormat", ""))))


def variable_queries() -> Iterator[tuple[str, str, str]]:
    """(variable, selector, label) of every ``label_values(selector, label)`` variable of the dashboard."""
    board = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        found = re.fullmatch(r"label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\)", query.strip())
        assert found, f"variable {variable['name']}: expected label_values(selector, label), got {query!r}"
        yield variable["name"], found[1], found[2]


def rule_queries() -> Iterator[Query]:
    for group in yaml.safe_load((MONITORING / "alerts.yml").read_text())["groups"]:
        for rule in group["rules"]:
            name = rule.get("alert") or rule.get("record")
            shown = {label for text in rule.get("annotations", {}).values()
                     for label in ANNOTATION_LABEL.findall(text)}
            yield Query(f"rule {name}", rule["expr"], frozenset(shown))


def metric_names(expr: str) -> set[str]:
    """The metric names ``expr`` selects (with or without a ``{...}`` block)."""
    names = {name for name, _ in SELECTOR.findall(expr)}
    rest = CLAUSE.sub(" ", SELECTOR.sub(r"\1", STRING.sub('""', expr)))
    rest = re.sub(r"\[[^\]]*\]", " ", rest)  # range durations such as [5m] or [$__rate_interval]
    for found in re.finditer(rf"(?<![\w$.]){NAME}\b(?!\s*\()", rest):
        if found[0] not in KEYWORDS:
            names.add(found[0])
    return names


def made_labels(expr: str) -> set[str]:
    """Labels ``label_replace`` writes (its second argument)."""
    return set(re.findall(r'label_replace\s*\(.*?,\s*"([a-zA-Z_][a-zA-Z0-9_]*)"', expr, flags=re.S))


def arguments(expr: str, function: str) -> Iterator[str]:
    """The argument text of every call of ``function`` in ``expr`` (balanced parentheses)."""
    for found in re.finditer(rf"\b{function}\s*\(", expr):
        depth, start = 1, found.end()
        for index in range(start, len(expr)):
            depth += {"(": 1, ")": -1}.get(expr[index], 0)
            if depth == 0:
                yield expr[start:index]
                break


def output_labels(expr: str, available: set[str]) -> set[str]:
    """The labels the result of ``expr`` keeps: those of its outer aggregation's ``by``, none for an aggregation
    without one, else every label its series have (a join keeps at most those)."""
    body = expr.strip()
    quantile = re.match(r"histogram_quantile\s*\(\s*[0-9.]+\s*,", body)
    if quantile:
        body = body[quantile.end():].strip()
    aggregation = re.match(rf"({AGGREGATIONS})\s*(?:(by|without)\s*\(([^)]*)\))?\s*\(", body)
    if aggregation is None:
        return available
    if aggregation[2] is None:
        return set()
    listed = {label.strip() for label in aggregation[3].split(",") if label.strip()}
    kept = listed if aggregation[2] == "by" else available - listed
    return kept - {"le"} if quantile else kept


def check(query: Query, scrape: Scrape) -> list[str]:
    """What is wrong with ``query`` against ``scrape`` (empty: nothing)."""
    problems = []
    names = metric_names(query.expr)
    if not names:
        problems.append("selects no metric")
    unknown = sorted(names - set(scrape.labels))
    if unknown:
        problems.append(f"metrics not exported: {', '.join(unknown)}")
    available = set().union(*(scrape.labels.get(name, set()) for name in names)) | made_labels(query.expr)
    for name, matchers in SELECTOR.findall(query.expr):
        missing = sorted(set(MATCHER.findall(STRING.sub('""', matchers))) - scrape.labels.get(name, set()))
        if name in scrape.labels and missing:
            problems.append(f"{name} has no label {', '.join(missing)}")
    for clause, listed in CLAUSE.findall(query.expr):
        missing = sorted({label.strip() for label in listed.split(",") if label.strip()} - available)
        if missing:
            problems.append(f"{clause} ({listed}): no series here has {', '.join(missing)}")
    for function, name in COUNTER_FUNCTIONS.findall(query.expr):
        if name in scrape.types and not scrape.is_counter(name):
            problems.append(f"{function}() of {name}, a {scrape.types[name]}: counters only")
    for inner in arguments(query.expr, "histogram_quantile"):
        buckets = [name for name in metric_names(inner)
                   if name.endswith("_bucket") and scrape.types.get(name) == "histogram"]
        if not buckets:
            problems.append(f"histogram_quantile of no histogram's _bucket: {inner.strip()}")
        groups = [listed for clause, listed in CLAUSE.findall(inner) if clause == "by"]
        if any("le" not in {label.strip() for label in listed.split(",")} for listed in groups):
            problems.append("histogram_quantile of buckets aggregated without le")
    hidden = sorted(query.shown - output_labels(query.expr, available))
    if hidden:
        problems.append(f"shows label {', '.join(hidden)}, which the result does not have")
    return problems


def test_the_scrape_is_of_the_running_runtime(scrape: Scrape) -> None:
    assert scrape.types["sbrs_frames_total"] == "counter"
    assert scrape.types["sbrs_inference_seconds_bucket"] == "histogram"
    assert {"scenario", "job", "instance"} <= scrape.labels["sbrs_frames_total"]


@pytest.mark.parametrize("query", [*dashboard_queries(), *rule_queries()], ids=lambda query: query.where)
def test_query_names_only_what_sbrs_exports(query: Query, scrape: Scrape) -> None:
    problems = check(query, scrape)
    assert not problems, f"{query.where}: {query.expr}\n" + "\n".join(problems)


@pytest.mark.parametrize(("variable", "selector", "label"), list(variable_queries()))
def test_dashboard_variables_name_exported_labels(variable: str, selector: str, label: str, scrape: Scrape) -> None:
    problems = check(Query(f"variable {variable}", selector), scrape)
    names = metric_names(selector)
    if not any(label in scrape.labels.get(name, set()) for name in names):
        problems.append(f"no series of {selector} has the label {label}")
    assert not problems, f"variable {variable}: " + "\n".join(problems)


@pytest.mark.parametrize(("expr", "problem"), [
    ('sbrs_frame_total{scenario="a"}', "metrics not exported: sbrs_frame_total"),
    ('sbrs_frames_total{scenarios="a"}', "sbrs_frames_total has no label scenarios"),
    ("sum by (reason) (rate(sbrs_frames_total[1m]))", "by (reason): no series here has reason"),
    ("rate(sbrs_environment_battery_ratio[1m])", "rate() of sbrs_environment_battery_ratio, a gauge"),
    ("histogram_quantile(0.9, sum by (scenario) (rate(sbrs_inference_seconds_bucket[1m])))",
     "aggregated without le"),
    ("histogram_quantile(0.9, rate(sbrs_inference_seconds_sum[1m]))", "of no histogram's _bucket"),
])
def test_the_check_finds_what_it_looks_for(expr: str, problem: str, scrape: Scrape) -> None:
    assert any(problem in line for line in check(Query("example", expr), scrape)), check(Query("example", expr),
                                                                                         scrape)


def test_a_legend_label_the_aggregation_drops_is_found(scrape: Scrape) -> None:
    query = Query("example", "max(sbrs_frames_total)", frozenset({"scenario"}))
    assert any("shows label scenario" in line for line in check(query, scrape))


def test_every_exported_sbrs_metric_is_known(scrape: Scrape) -> None:
    """The observer's list of names matches what the endpoint serves (the README's table is written from it)."""
    families = {name.removesuffix("_total").removesuffix("_info") for name in MetricsObserver.METRICS}
    served = {name for name in scrape.labels if name.startswith("sbrs_")}
    for name in served:
        assert any(name.startswith(family) for family in families), name
