"""The build's timings are made once per machine and unit files (``sbrs.compile.timing_cache``): a rebuild takes
them from the cache, figures from a busy machine are remeasured once it is quiet, and a damaged or unwritable
entry costs a measurement, never the build."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sbrs.app import load_app
from sbrs.artifact.read import load_build
from sbrs.artifact.write import compile_app
from sbrs.compile import timing_cache
from sbrs.compile.timing_cache import files_digest, measured_once, timing_path
from tests.conftest import REPO


class Counter:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> dict[str, int]:
        self.calls += 1
        return {"measured": self.calls}


def at_load(monkeypatch: pytest.MonkeyPatch, load: float | None) -> None:
    monkeypatch.setattr(timing_cache, "load_average", lambda: load)


def test_figures_are_measured_once_then_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    at_load(monkeypatch, 0.2)
    measure, path = Counter(), tmp_path / "entry.json"
    first = measured_once(path, measure)
    again = measured_once(path, measure)
    assert (first.figures, first.cached, first.load) == ({"measured": 1}, False, 0.2)
    assert (again.figures, again.cached, again.load) == ({"measured": 1}, True, 0.2) and measure.calls == 1


def test_busy_figures_are_kept_while_busy_and_remeasured_when_quiet(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    measure, path = Counter(), tmp_path / "entry.json"
    busy = 4.0 * (timing_cache.os.cpu_count() or 1)
    at_load(monkeypatch, busy)
    assert measured_once(path, measure).figures == {"measured": 1}
    assert measured_once(path, measure).cached  # still busy: the first figures, not new noise
    at_load(monkeypatch, 0.1)
    quiet = measured_once(path, measure)
    assert (quiet.figures, quiet.cached, quiet.load) == ({"measured": 2}, False, 0.1)
    at_load(monkeypatch, busy)
    assert measured_once(path, measure).figures == {"measured": 2} and measure.calls == 2  # quiet figures stay


@pytest.mark.parametrize("damage", ["not json", '{"figures": 1}', '["load", "figures"]'])
def test_a_damaged_entry_is_measured_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    at_load(monkeypatch, 0.1)
    path = tmp_path / "entry.json"
    path.write_text(damage)
    measure = Counter()
    assert measured_once(path, measure).figures == {"measured": 1}
    assert measured_once(path, measure).cached and measure.calls == 1


def test_an_unwritable_cache_costs_a_measurement_not_the_build(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    measure = Counter()
    assert measured_once(blocker / "entry.json", measure).figures == {"measured": 1}
    assert measured_once(blocker / "entry.json", measure).figures == {"measured": 2}


def test_the_key_follows_the_files_bytes_and_the_settings(tmp_path: Path) -> None:
    one, two = tmp_path / "a.onnx", tmp_path / "b.onnx"
    one.write_bytes(b"12")
    two.write_bytes(b"34")
    digest = files_digest([one, two])
    assert files_digest([one, two]) == digest
    assert timing_path("streams", digest, 1) == timing_path("streams", files_digest([one, two]), 1)
    two.write_bytes(b"35")
    assert files_digest([one, two]) != digest
    assert timing_path("streams", digest, 1) not in {timing_path("streams", digest, 2),
                                                     timing_path("unit-threads", digest, 1)}


def test_a_rebuild_reproduces_the_build_with_the_cached_timings(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """Two builds of one app, the second in another folder: the same streams and unit threads, from the first
    build's figures (which the manifest keeps, load included). The load is held steady and the timings kept apart
    from the run's cache: figures kept from a busy moment, by this build or by another worker's build of the same
    app in between, would be taken again by the second build."""
    at_load(monkeypatch, 0.0)
    monkeypatch.setattr(timing_cache, "cache_dir", lambda kind: tmp_path / "cache" / kind)
    manifests = []
    for folder in ("first", "second"):
        (tmp_path / folder).mkdir()
        app_path = tmp_path / folder / "tiny.yaml"
        shutil.copy(REPO / "apps" / "tiny.yaml", app_path)
        compile_app(load_app(app_path))
        manifests.append(load_build(app_path))
    first, second = manifests
    assert first.streams_choice == second.streams_choice and first.streams_choice["figures"] is not None
    assert first.unit_threads == second.unit_threads and first.plan == second.plan
