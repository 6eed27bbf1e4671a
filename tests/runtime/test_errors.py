"""Invariant 5: bad input is one line, changes nothing, and the runtime goes on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from sbrs.app import App
from sbrs.errors import InputError, SbrsRuntimeError
from sbrs.runtime import runtime_for
from tests.runtime.conftest import References, assert_equivalent, random_frame


def one_line(error: pytest.ExceptionInfo[InputError]) -> str:
    text = str(error.value)
    assert "\n" not in text
    return text


def test_rejected_frames_and_switches_leave_the_runtime_working(load_example: Callable[[str], App]) -> None:
    app = load_example("tiny")
    references = References(app)
    frame = random_frame(app, 9)
    with runtime_for(app) as runtime:
        runtime.switch("skip")
        bad_frames = [
            frame[:, :, :31],                                   # wrong shape
            frame.astype(np.float64),                           # wrong dtype
            {"not-the-input": frame},                           # a dict with a wrong key
            {"input": frame, "extra": frame},                   # one key too many
            frame.tolist(),                                     # not an array
        ]
        for bad in bad_frames:
            with pytest.raises(InputError) as error:
                runtime.infer(bad)  # type: ignore[arg-type]
            assert "input" in one_line(error)
        with pytest.raises(InputError) as error:
            runtime.switch("no-such-scenario")
        assert "no-such-scenario" in one_line(error) and "skip" in one_line(error)
        assert runtime.scenario == "skip"
        assert_equivalent(runtime.infer(frame), references.outputs("skip", frame), "after rejected input")
        assert_equivalent(runtime.infer({"input": frame}), references.outputs("skip", frame), "dict frame")
    with pytest.raises(SbrsRuntimeError):
        runtime.infer(frame)
    with pytest.raises(SbrsRuntimeError, match="closed"):  # not "unknown scenario 'skip' (scenarios: ..., skip)"
        runtime.switch("skip")
    runtime.close()  # twice: nothing to release


def test_an_unavailable_provider_is_named_with_the_available_ones(load_example: Callable[[str], App]) -> None:
    app = load_example("tiny")
    options = replace(app.config.runtime, providers=("CUDAExecutionProvider",))
    broken = replace(app, config=replace(app.config, runtime=options))
    with pytest.raises(InputError) as error:
        runtime_for(broken)
    text = one_line(error)
    assert "CUDAExecutionProvider" in text and "CPUExecutionProvider" in text
    unknown = replace(app, config=replace(app.config, runtime=replace(options, providers=("FancyProvider",))))
    with pytest.raises(InputError, match="FancyProvider"):
        runtime_for(unknown)
    with runtime_for(app) as runtime:  # nothing was broken by the failed attempts
        runtime.infer(random_frame(app, 1))


def test_unknown_granularity_is_an_input_error(load_example: Callable[[str], App]) -> None:
    with pytest.raises(InputError, match="granularity"):
        runtime_for(load_example("tiny"), granularity="block")


def test_runtime_for_names_what_it_takes(tmp_path: Path) -> None:
    """An int or bytes went on as if it were a loaded App (``AttributeError: 'int' object has no attribute
    'config'``); a folder read as "no such file"; an option it does not take as an error of ``Runtime.__init__``."""
    import sbrs

    for wrong in (3, b"apps/tiny.yaml"):
        with pytest.raises(TypeError, match=f"an app file's path .* or a loaded sbrs App, not {type(wrong).__name__}"):
            sbrs.runtime_for(wrong)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="is a folder, not an app file"):
        sbrs.runtime_for(tmp_path)
    for option in ("streams", "bogus"):  # named Runtime.__init__'s keyword, which the caller never called
        with pytest.raises(TypeError, match=f"runtime_for got unknown option {option} .*runtime.streams"):
            sbrs.runtime_for(tmp_path / "app.yaml", **{option: 1})
    from sbrs.artifact.read import build_dir

    assert not build_dir(tmp_path).exists()  # no build was started for it
