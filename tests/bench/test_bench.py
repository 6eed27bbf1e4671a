"""``sbrs bench`` end to end: every key of the report, caller-side switch delays."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from sbrs.bench.bench import format_report
from sbrs.cli import main
from tests.conftest import REPO, REPO_BUILDS

pytestmark = REPO_BUILDS  # builds an example app inside the repository (tests/conftest.py)

TINY = str(REPO / "apps" / "tiny.yaml")


def test_bench_smoke_reports_every_key(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # run from a folder holding a directory named sbrs: the processes measured import the installed sbrs
    # (tests/cli/test_hardening.py, row 13)
    (tmp_path / "sbrs").mkdir()
    (tmp_path / "sbrs" / "__init__.py").write_text("raise ImportError('the wrong sbrs')\n")
    monkeypatch.chdir(tmp_path)
    assert main(["bench", TINY, "--json", "--frames", "2", "--repeats", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    for key in ("scenarios", "granularity", "arena_bytes", "threads", "threads_scope", "device_memory"):
        assert key in report
    assert set(report["scenarios"]) == {"full", "skip", "exit"}
    for row in report["scenarios"].values():
        assert {"fps", "ort_fps", "ratio", "ort_fps_threads", "ort_fps_two_frames", "ort_best"} <= set(row)
        # the baseline is plain ONNX Runtime at the better of its two settings
        assert row["ort_fps"] == max(row["ort_fps_threads"], row["ort_fps_two_frames"])
    device = report["device_memory"]
    plan = device["plan"]
    assert plan["plan_bytes"] == plan["params_bytes"] + plan["tensors_bytes"] + plan["transition_bytes"] > 0
    assert device["bound_bytes"] == int(1.1 * plan["plan_bytes"] + 13_000_000)
    for name in ("sbrs_run", "python_api", "plain_ort", "plain_ort_trimmed", "plain_ort_active",
                 "plain_ort_active_trimmed", "onnxruntime_code"):
        row = device["summary"][name]
        # above the same bare interpreter: a process that loaded models holds more; PSS never above RSS, peak
        # never below RSS. Both within 1 MB: each figure is a difference of two processes' counters, and the bare
        # interpreter's own peak can stand a few pages above its RSS (pages it gave back), which lowers the peak
        # above it by as much (CI on 89b79d2: peak 16216064 against RSS 16220160, one 4 kB page)
        assert 0 < row["pss_bytes"] <= row["rss_bytes"] + 1_000_000
        assert row["peak_rss_bytes"] >= row["rss_bytes"] - 1_000_000
    # ONNX Runtime's code measured in the same run: one small convolution's process, the bound built on it
    code = device["summary"]["onnxruntime_code"]["pss_bytes"]
    assert device["bound_same_run_bytes"] == int(1.1 * plan["plan_bytes"] + code + 3_000_000)
    # plain ONNX Runtime with the largest model alone is judged by the same bounds (is the bound reachable at all)
    for name in ("sbrs_run", "python_api", "plain_ort_active_trimmed"):
        row = device["summary"][name]
        assert row["within_bound"] == (row["pss_bytes"] <= device["bound_bytes"])
        assert row["within_same_run_bound"] == (row["pss_bytes"] <= device["bound_same_run_bytes"])
    assert set(device["python_api"]["stages"]) == {"bare", "imported", "loaded", "ran"}
    split = device["summary"]["where_it_goes_pss_bytes"]
    assert split["weights_files"] > 0  # the build's weights are mapped from its files
    assert device["sbrs_run"]["stages"]["ran"]["rss_bytes"] > 0 and "ran" in device["python_api"]["stages"]
    assert isinstance(device["summary"]["sbrs_modules_compiled_from_source"], int)
    out = format_report(report)  # what sbrs bench prints without --json
    assert "ratio" in out and "device memory of tiny" in out and "sbrs run (control socket)" in out
    assert "plain ORT, largest scenario alone" in out and out.count("the same after malloc_trim") == 2


@pytest.mark.slow  # a second bench of tiny (11 s): the fast tier prints the report of the one above
def test_bench_prints_its_report_at_another_granularity(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", TINY, "--frames", "2", "--repeats", "1", "--granularity", "layer"]) == 0
    out = capsys.readouterr().out
    assert "ratio" in out and "device memory of tiny" in out and "sbrs run (control socket)" in out
    assert "plain ORT, largest scenario alone" in out and out.count("the same after malloc_trim") == 2
    assert "app tiny: granularity layer," in out


def test_bench_switching_reports_caller_side_delays(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", TINY, "--switching", "--json", "--repeats", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    methods = ["sbrs-tp", "sbrs-naive", "ort-all", "ort-load"]
    assert report["methods"] == methods
    assert set(report["pairs"]) == {f"{a}->{b}" for a in ("full", "skip", "exit") for b in ("full", "skip", "exit")
                                    if a != b}
    for row in [*report["pairs"].values(), report["overall"]]:
        for method in methods:
            assert row[method]["mean_s"] > 0 and row[method]["p95_s"] > 0
        # the caller's clock starts before the request reaches the runtime and stops after the output left it
        for method in ("sbrs-tp", "sbrs-naive"):
            assert 0 < row[method]["internal_mean_s"] <= row[method]["mean_s"]
        assert set(row["ratios"]) == {"sbrs-tp", "sbrs-naive", "ort-load"}
    assert main(["bench", TINY, "--switching", "--repeats", "1", "--methods", "sbrs-tp,ort-all"]) == 0
    assert "sbrs-tp/ort-all" in capsys.readouterr().out
    assert main(["bench", TINY, "--switching", "--methods", "sbrs-tp,nope"]) == 2
    assert "nope" in capsys.readouterr().err


def test_device_memory_without_a_build_is_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """The probes read the build's manifest only; no build is one line naming the folder, from a clean child
    too (this process holds numpy, so the measuring runs in one)."""
    from sbrs.bench.device_memory import build_facts, measure_device_memory
    from sbrs.errors import InputError, SbrsRuntimeError

    app = tmp_path / "none.yaml"
    app.write_text("name: none\n")
    with pytest.raises(InputError, match=r"none\.build.*sbrs build"):
        build_facts(app)
    with pytest.raises(SbrsRuntimeError, match="no readable build"):
        measure_device_memory(app, frames=1)


def test_device_memory_with_a_scenario_model_gone_is_one_line(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """An app of inline layers finds its models in the model cache: once that is cleared, the build still runs
    but plain ONNX Runtime's side has no model to load; ``sbrs bench`` rebuilds (``current_build``) and the
    measurement alone says what to do, in one line."""
    import json

    from sbrs.bench.device_memory import build_facts
    from sbrs.errors import InputError

    (tmp_path / "gone.build").mkdir()
    config = {"name": "gone", "input": {"name": "input", "shape": [1, 3, 8, 8], "dtype": "float32"},
              "scenarios": [{"name": "a", "model_path": str(tmp_path / "cache" / "a.onnx")}]}
    footprint = {"params_bytes": 1, "tensors_bytes": 1, "transition_bytes": 0, "plan_bytes": 2}
    (tmp_path / "gone.build" / "manifest.json").write_text(json.dumps({"config": config, "footprint": footprint}))
    with pytest.raises(InputError, match=r"a\.onnx is gone; run `sbrs build"):
        build_facts(tmp_path / "gone.yaml")


def test_probes_tell_modules_compiled_from_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A process without cached bytecode compiles sbrs from source, which the device-memory figures carry: the
    probes name such modules (a module whose ``__cached__`` file is missing)."""
    import importlib.util
    import sys
    import types

    from sbrs.bench.device_memory import PROBES

    spec = importlib.util.spec_from_file_location("probe_stages", PROBES / "stages.py")
    assert spec is not None and spec.loader is not None
    stages = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stages)
    cached, uncached = tmp_path / "a.pyc", tmp_path / "b.pyc"
    cached.write_bytes(b"")
    for name, path in (("fakepkg", cached), ("fakepkg.b", uncached), ("fakepkgother", uncached)):
        module = types.ModuleType(name)
        module.__cached__ = str(path)  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, name, module)
    assert stages.compiled_here("fakepkg") == ["fakepkg.b"]


def test_each_timed_block_starts_after_the_default_sessions_threads_stopped_spinning(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """ONNX Runtime's default session spins its threads some 30 ms after a call: plain two frames at once timed in
    that moment ran at one thread's speed and made plain ONNX Runtime's better setting look slower than it is.
    Every timed block starts at least ``DEFAULT_SPIN_SETTLE_S`` after the block before it ended."""
    import time

    from sbrs.bench import bench
    from sbrs.ort_env import DEFAULT_SPIN_SETTLE_S

    blocks: list[tuple[str, float, float]] = []
    real_sides = bench._sides

    def sides(*args: object) -> dict[str, object]:
        def timed(name: str, measure: Callable[[], float]) -> Callable[[], float]:
            def run() -> float:
                start = time.perf_counter()
                fps = measure()
                blocks.append((name, start, time.perf_counter()))
                return fps
            return run
        return {name: timed(name, measure) for name, measure in real_sides(*args).items()}

    monkeypatch.setattr(bench, "_sides", sides)
    monkeypatch.setattr(bench, "WARM_UP_S", 0.0)
    bench.measure_throughput(TINY, frames=2, repeats=2, granularity=None)
    assert {name for name, _, _ in blocks} == {"sbrs", "ort_threads", "ort_two_frames"}
    assert len(blocks) == 3 * 3 * (1 + 2)  # scenarios x sides x (the warm-up's block and two repeats)
    for (_, _, ended), (_, started, _) in itertools.pairwise(blocks):
        assert started - ended >= DEFAULT_SPIN_SETTLE_S
