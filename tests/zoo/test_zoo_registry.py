"""Registry API: listing, option validation, export and the export cache."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import onnx
import pytest

from sbrs import zoo
from sbrs.cache import cache_dir
from sbrs.errors import InputError

EXPECTED = {
    "mobilenet_v1",
    "mobilenet_v2",
    "resnet18",
    "resnet50",
    "squeezenet1_1",
    "efficientnet_b0",
    "cifar_resnet",
    "har_cnn",
    "yolo_detector",
}


def test_list_models() -> None:
    entries = zoo.list_models()
    assert {e.name for e in entries} == EXPECTED
    for entry in entries:
        assert entry.description and "seed" in entry.options and "classes" in entry.options
        for spec in entry.options.values():
            assert spec.type in zoo.OPTION_TYPES and spec.help
        assert zoo.normalize_options(entry.name, {}) == {k: s.default for k, s in entry.options.items()}
    families = {"resnet18", "resnet50", "cifar_resnet", "mobilenet_v2"}
    for entry in entries:
        if entry.name in families:
            assert {"drop_blocks", "exit_stage", "head_width"} <= entry.options.keys()


def test_entries_are_frozen() -> None:
    entry = zoo.get_model("resnet18")
    with pytest.raises(AttributeError):
        entry.name = "x"  # type: ignore[misc]
    entry.options.clear()
    assert zoo.get_model("resnet18").options  # no shared mutable state


def test_unknown_model_lists_choices() -> None:
    with pytest.raises(InputError, match=r"unknown zoo model 'resnet19'.*resnet18") as err:
        zoo.build("resnet19")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("options", "field", "pattern"),
    [
        ({"depth": 18}, "depth", "unknown option 'depth'.*valid: seed, resolution, classes"),
        ({"seed": "x"}, "seed", "must be int"),
        ({"seed": True}, "seed", "must be int"),
        ({"resolution": 224.0}, "resolution", "must be int"),
        ({"drop_blocks": 1}, "drop_blocks", "must be int_list"),
        ({"drop_blocks": [1.0]}, "drop_blocks", "must be int_list"),
        ({"exit_stage": "2"}, "exit_stage", "must be int or null"),
        ({"classes": None}, "classes", "must be int"),
    ],
)
def test_ill_typed_options(options: dict[str, Any], field: str, pattern: str) -> None:
    with pytest.raises(InputError, match=pattern) as err:
        zoo.build("resnet18", **options)
    assert err.value.field == field


def test_float_option_accepts_int() -> None:
    assert zoo.normalize_options("mobilenet_v2", {"width": 1})["width"] == 1.0
    with pytest.raises(InputError):
        zoo.build("mobilenet_v2", width="1.0")


def test_parse_option_text() -> None:
    assert zoo.parse_option_text("resnet18", "drop_blocks", "1,3") == [1, 3]
    assert zoo.parse_option_text("resnet18", "drop_blocks", "[1, 3]") == [1, 3]
    assert zoo.parse_option_text("resnet18", "drop_blocks", "") == []
    assert zoo.parse_option_text("resnet18", "exit_stage", "none") is None
    assert zoo.parse_option_text("mobilenet_v2", "width", "0.5") == 0.5
    with pytest.raises(InputError, match="must be int") as err:
        zoo.parse_option_text("resnet18", "seed", "abc")
    assert err.value.field == "seed"
    with pytest.raises(InputError, match="unknown option"):
        zoo.parse_option_text("resnet18", "nope", "1")


def test_export_writes_the_build(tmp_path: Path) -> None:
    path = zoo.export("cifar_resnet", tmp_path / "c.onnx", seed=2, depth=20)
    assert path == tmp_path / "c.onnx"
    assert path.read_bytes() == zoo.build("cifar_resnet", seed=2).SerializeToString()
    onnx.checker.check_model(str(path), full_check=True)
    assert [p.name for p in tmp_path.iterdir()] == ["c.onnx"]
    with pytest.raises(InputError, match="does not exist"):
        zoo.export("cifar_resnet", tmp_path / "missing" / "c.onnx")


def test_cached_export_reuses_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SBRS_CACHE_DIR", str(tmp_path / "cache"))
    first = zoo.cached_export("har_cnn", {"seed": 1})
    assert first.parent == tmp_path / "cache" / "zoo" and first.name.startswith("har_cnn-")
    assert first.read_bytes() == zoo.build("har_cnn", seed=1).SerializeToString()
    stamp = first.stat().st_mtime_ns

    def fail(name: str, **options: Any) -> onnx.ModelProto:
        raise AssertionError("the cached file should be reused")

    monkeypatch.setattr(zoo, "build", fail)
    again = zoo.cached_export("har_cnn", {"seed": 1, "classes": 12})  # defaults spelled out: same key
    assert again == first and again.stat().st_mtime_ns == stamp
    monkeypatch.undo()
    monkeypatch.setenv("SBRS_CACHE_DIR", str(tmp_path / "cache"))
    other = zoo.cached_export("har_cnn", {"seed": 2})
    assert other != first
    models = sorted(p.name for p in (tmp_path / "cache" / "zoo").iterdir() if p.suffix == ".onnx")
    assert models == sorted([first.name, other.name])
    with pytest.raises(InputError):
        zoo.cached_export("har_cnn", {"speed": 2})


def test_cache_dir_fallbacks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SBRS_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir("zoo") == tmp_path / "sbrs" / "zoo"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir("zoo") == tmp_path / "home" / ".cache" / "sbrs" / "zoo"
    assert not os.path.exists(tmp_path / "home")


@pytest.mark.parametrize(("name", "options"), [("resnet18", {"classes": 100_000_000}),
                                               ("resnet18", {"head_width": 100_000_000})])
def test_an_option_asking_for_gigabytes_of_weights_is_refused_before_they_are_drawn(name: str,
                                                                                    options: dict[str, Any]) -> None:
    """``classes: 100000000`` asked numpy for 191 GiB: a MemoryError, exit 1 (or the machine's memory)."""
    with pytest.raises(InputError, match=r"takes the model's weights past 268,435,456 values \(1 GiB of float32\)"):
        zoo.build(name, **options)
