"""The test session's own housekeeping (``tests/conftest.py``)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import remove_builds_into


def test_builds_into_the_private_cache_are_removed_and_others_kept(tmp_path: Path) -> None:
    cache = tmp_path / "sbrs-cache0"
    ours = tmp_path / "apps" / "drone.build"
    theirs = tmp_path / "apps" / "tiny.build"
    nested = tmp_path / "tests" / "data" / "limited" / "limited.build"
    for folder, models in ((ours, cache), (theirs, Path("/home/user/.cache/sbrs")), (nested, cache)):
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text(f'{{"model_path": "{models}/zoo/resnet18.onnx"}}', encoding="utf-8")
    assert sorted(remove_builds_into(cache, tmp_path)) == sorted([ours, nested])
    assert not ours.exists() and not nested.exists() and (theirs / "manifest.json").is_file()
