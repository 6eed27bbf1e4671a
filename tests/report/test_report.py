"""``sbrs report``: the files it writes are there and valid (PNG, HTML that parses and carries its pictures
inside, an ONNX graph Netron opens), on apps/tiny.yaml; measured inputs are read or made; a missing matplotlib
and bad inputs are one line and exit status 2."""

from __future__ import annotations

import json
import shutil
import sys
from html.parser import HTMLParser
from pathlib import Path

import onnx
import pytest

from sbrs.app import load_app
from sbrs.cli import main
from sbrs.moc import derive_moc
from sbrs.model.cnn import INPUT_OP, OUTPUT_OP
from tests.conftest import APPS, REPO, REPO_BUILDS, made_once

pytestmark = REPO_BUILDS  # builds an example app inside the repository (tests/conftest.py)

TINY = next(p for p in APPS if p.stem == "tiny")
LIMITED = REPO / "tests" / "data" / "limited" / "limited.yaml"
PNG = b"\x89PNG\r\n\x1a\n"


class _Page(HTMLParser):
    """What a browser would fetch to show the page: every src, every href, and the section ids."""

    def __init__(self) -> None:
        super().__init__()
        self.sources: list[str] = []
        self.links: list[str] = []
        self.ids: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if found.get("src") is not None:
            self.sources.append(str(found["src"]))
        if tag == "a" and found.get("href") is not None:
            self.links.append(str(found["href"]))
        if tag == "section" and found.get("id") is not None:
            self.ids.append(str(found["id"]))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _page(folder: Path) -> _Page:
    page = _Page()
    page.feed((folder / "index.html").read_text(encoding="utf-8"))
    page.close()
    return page


def _report(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["report", *args, "--json"]) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def measured() -> Path:
    """A report of tiny with short bench runs and a short reduction search made for it (``--measure``): every
    picture, the Pareto front of a search run for the report (tiny sets no memory_limit_mb)."""
    def measure(folder: Path) -> None:
        assert main(["report", str(TINY), "-o", str(folder), "--measure", "-q"]) == 0

    return made_once("report-measured", measure)


def _assert_valid(folder: Path, pictures: set[str]) -> _Page:
    for name in pictures:
        data = (folder / name).read_bytes()
        assert data.startswith(PNG) and len(data) > 5000, name
    page = _page(folder)
    # Opens offline: every picture is inside the page; links point only at the files beside it.
    assert len(page.sources) == len(pictures) and all(s.startswith("data:image/png;base64,") for s in page.sources)
    assert set(page.links) <= {"supergraph.onnx", "supergraph.json"} | {f"#{i}" for i in page.ids}
    assert page.ids == ["summary", "supergraph", "memory", "switching", "reduction"]
    return page


def test_the_default_report_is_fast_and_says_what_is_missing(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    result = _report(capsys, str(TINY), "-o", str(tmp_path / "out"))
    folder = tmp_path / "out"
    assert set(result["files"]) == {"page", "supergraph", "netron", "moc_json", "memory"}
    assert set(result["missing"]) == {"switching", "pareto"}
    page = _assert_valid(folder, {"supergraph.png", "memory.png"})
    text = " ".join(" ".join(page.text).split())
    assert "No switch timeline" in text and "--switching" in text
    assert "No Pareto front: this app sets no memory_limit_mb" in text
    assert "No measured device memory" in text
    assert "app tiny: 3 scenarios" in text  # the summary of sbrs inspect


def test_the_supergraph_exports_open_as_onnx_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _report(capsys, str(TINY), "-o", str(tmp_path))
    app = load_app(TINY)
    moc = derive_moc(app.models, app.config.adaptive)
    model = onnx.load(str(tmp_path / "supergraph.onnx"))
    layers = [layer for layer in moc.layers if layer.op not in (INPUT_OP, OUTPUT_OP)]
    assert [node.name for node in model.graph.node] == [layer.id for layer in layers]
    assert [node.op_type for node in model.graph.node] == [layer.op for layer in layers]
    scenarios = {node.name: next(a.s.decode() for a in node.attribute if a.name == "sbrs_scenarios")
                 for node in model.graph.node}
    assert all(scenarios[layer.id] == ", ".join(layer.scenarios) for layer in layers)
    assert len(model.graph.input) == 1 and len(model.graph.output) >= 1
    assert len(json.loads((tmp_path / "supergraph.json").read_text())["layers"]) == len(moc.layers)


def test_measure_draws_every_measured_picture_and_keeps_the_runs(measured: Path) -> None:
    page = _assert_valid(measured, {"supergraph.png", "memory.png", "switching.png", "pareto.png"})
    text = " ".join(" ".join(page.text).split())
    assert "No measured device memory" not in text and "No switch timeline" not in text
    assert "No Pareto front" not in text and "a short search made for this report" in text
    assert "sbrs-tp" in text  # the switching table
    assert json.loads((measured / "bench.json").read_text())["device_memory"]["plan"]["plan_bytes"] > 0
    assert json.loads((measured / "switching.json").read_text())["pairs"]


def test_bench_files_given_are_read(measured: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = _report(capsys, str(TINY), "-o", str(tmp_path), "--bench", str(measured / "bench.json"),
                     "--switching", str(measured / "switching.json"))
    assert set(result["missing"]) == {"pareto"}
    _assert_valid(tmp_path, {"supergraph.png", "memory.png", "switching.png"})


def test_the_pareto_front_of_an_app_under_a_memory_limit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    app_path = tmp_path / "limited.yaml"
    shutil.copy(LIMITED, app_path)
    result = _report(capsys, str(app_path), "-o", str(tmp_path / "before"))
    assert "No Pareto front: the app's plan holds no reduction search" in result["missing"]["pareto"]
    assert main(["build", str(app_path), "-q", "--cost", "analytic", "--population", "8", "--generations", "2"]) == 0
    capsys.readouterr()
    result = _report(capsys, str(app_path), "-o", str(tmp_path / "after"))
    assert "pareto" in result["files"] and "pareto" not in result["missing"]
    page = _assert_valid(tmp_path / "after", {"supergraph.png", "memory.png", "pareto.png"})
    assert "chosen" in " ".join(page.text)


def _error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["report", *args]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("sbrs: error: ")
    return lines[0]


def test_without_matplotlib_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    assert "pip install 'sbrs[plots]'" in _error(capsys, str(TINY), "-o", str(tmp_path))
    assert not list(tmp_path.iterdir())


def test_bad_inputs_are_one_line_naming_file_and_field(measured: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    bench, switching = measured / "bench.json", measured / "switching.json"
    out = str(tmp_path / "out")
    assert "give it as --switching" in _error(capsys, str(TINY), "-o", out, "--bench", str(switching))
    assert "give it as --bench" in _error(capsys, str(TINY), "-o", out, "--switching", str(bench))
    other = tmp_path / "other.json"
    other.write_text(json.dumps({**json.loads(bench.read_text()), "app": "drone"}))
    assert f"{other}: app: is a run of app 'drone'" in _error(capsys, str(TINY), "-o", out, "--bench", str(other))
    broken = json.loads(switching.read_text())
    del next(iter(broken["pairs"].values()))["old_frame_s"]
    other.write_text(json.dumps(broken))
    assert ".old_frame_s: missing" in _error(capsys, str(TINY), "-o", out, "--switching", str(other))
    other.write_text("{not json")
    assert "not a readable JSON file" in _error(capsys, str(TINY), "-o", out, "--bench", str(other))
    assert "no such file" in _error(capsys, str(TINY), "-o", out, "--bench", str(tmp_path / "absent.json"))
    assert "-o: exists and is not a folder" in _error(capsys, str(TINY), "-o", str(other))
    assert not (tmp_path / "out").exists()  # inputs are checked before anything is written


def test_a_file_whose_parts_are_not_objects_is_one_line_naming_the_field(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    """An object where the pictures read one (``sbrs build --json``'s ``scenarios`` is a list) was an internal
    error (``AttributeError``) naming nothing."""
    out, other = str(tmp_path / "out"), tmp_path / "other.json"
    bench = {"app": "tiny", "scenarios": ["full"]}
    switching = {"app": "tiny", "methods": ["sbrs-tp"], "overall": [],
                 "pairs": {"full->skip": {"old_frame_s": 0.1, "new_frame_s": 0.1,
                                          "sbrs-tp": {"mean_s": 0.1, "p95_s": 0.1}}}}
    memory = {"app": "tiny", "scenarios": {}, "device_memory": {"plan": {}, "summary": [], "bound_bytes": 1}}
    for option, report, field in (("--bench", bench, "scenarios"), ("--switching", switching, "overall"),
                                  ("--bench", memory, "device_memory.summary")):
        if field == "device_memory.summary":
            memory["device_memory"]["plan"] = dict.fromkeys(("params_bytes", "tensors_bytes", "transition_bytes",
                                                             "plan_bytes"), 1)
        other.write_text(json.dumps(report))
        assert f"{other}: {field}: expected an object" in _error(capsys, str(TINY), "-o", out, option, str(other))
    assert not (tmp_path / "out").exists()


def test_the_short_front_search_searches_below_the_folded_plan() -> None:
    """An app without a memory limit gets a real front (drone's first try met its own limit unreduced: the search
    sees folded models, whose plan is below the app plan's)."""
    from sbrs.app import load_app
    from sbrs.report.make import front_search
    from sbrs.report.summary import plan_for

    app = load_app(TINY)
    found = front_search(app, plan_for(app))
    unreduced = found["unreduced"]["memory_bytes"]
    assert not found["early_exit"] and len(found["pareto"]) > 1
    assert found["chosen"]["memory_bytes"] < unreduced
    assert min(p["memory_bytes"] for p in found["pareto"]) < unreduced
