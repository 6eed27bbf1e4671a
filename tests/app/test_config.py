"""App and scenario YAML: what loads, and a one-line error with exit status 2 for each validation rule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from sbrs.app import load_app, load_app_config
from sbrs.cli import main
from tests.conftest import assert_one_line_error


def _write_model(path: Path, shape: list[int | str], channels_out: int = 4, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((channels_out, shape[1], 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["data", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["out"])],
        "m", [helper.make_tensor_value_info("data", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)], initializer=[numpy_helper.from_array(weight, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


APP = """\
name: demo
input: {name: input, shape: [1, 3, 8, 8], dtype: float32}
adaptive: [I, O, par]
initial: big
scenarios:
  - name: big
    model: big.onnx
    requirements: {accuracy: 0.7, throughput: 0.3}
    characteristics: {accuracy: 77.8, fps: 15.4, energy_j: 0.384}
  - file: scenarios/small.yaml
runtime: {providers: [CPUExecutionProvider], threads: 2, granularity: auto, transition: sbrs-tp}
memory_limit_mb: 16
"""

SMALL = """\
name: small
model: ../small.onnx
requirements: {accuracy: 0.25, throughput: 0.25, memory: 0.25, energy: 0.25}
"""


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    _write_model(tmp_path / "big.onnx", ["N", 3, 8, 8], channels_out=8)
    _write_model(tmp_path / "small.onnx", [1, 3, 8, 8], channels_out=4, seed=1)
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "small.yaml").write_text(SMALL)
    (tmp_path / "app.yaml").write_text(APP)
    return tmp_path


def test_valid_app_loads(app_dir: Path) -> None:
    app = load_app(app_dir / "app.yaml")
    config = app.config
    assert config.scenario_names == ("big", "small")
    assert config.initial == "big" and config.adaptive == ("I", "O", "par")
    assert config.runtime.threads == 2 and config.memory_limit_mb == 16
    assert config.scenario("big").requirements.throughput == 0.3
    assert config.scenario("small").requirements.energy == 0.25
    assert config.scenario("big").characteristics.fps == 15.4
    assert config.scenario("small").defined_in.endswith("small.yaml")
    # The symbolic batch of big.onnx is fixed by the app's input shape.
    assert app.models["big"].tensors["out"].shape == (1, 8, 8, 8)
    summary = app.summary()
    assert summary["params_bytes"] == (8 + 4) * 3 * 9 * 4
    assert summary["scenarios"]["big"]["naive_buffer_bytes"] == (3 + 8 + 8) * 64 * 4


def test_defaults(tmp_path: Path) -> None:
    _write_model(tmp_path / "m.onnx", [1, 3, 8, 8])
    (tmp_path / "app.yaml").write_text("name: d\ninput: {shape: [1, 3, 8, 8]}\nscenarios: [{name: only, model: m.onnx}]\n")
    config = load_app_config(tmp_path / "app.yaml")
    assert config.initial == "only" and config.adaptive == ("I", "O", "par")
    assert config.runtime.providers == ("CPUExecutionProvider",) and config.runtime.granularity == "auto"
    assert config.runtime.threads_scope == "session"  # sbrs changes nothing process-wide unless asked to
    assert config.runtime.streams == "auto"  # for units the build's measured choice, by parts the search's
    assert config.scenario("only").requirements.accuracy == 1.0
    # left out: the provider's defaults (a GPU's in tests/compile/test_units.py); given: kept as given
    assert (config.runtime.share_min_mb, config.runtime.switch_steps) == (None, None)
    assert (config.runtime.unit_share_min_mb, config.runtime.unit_switch_steps) == (1.0, 4)
    (tmp_path / "app.yaml").write_text("name: d\ninput: {shape: [1, 3, 8, 8]}\nscenarios: [{name: only, model: m.onnx}]\n"
                                       "runtime: {providers: [CUDAExecutionProvider], share_min_mb: 2, switch_steps: 3}\n")
    config = load_app_config(tmp_path / "app.yaml")
    assert (config.runtime.unit_share_min_mb, config.runtime.unit_switch_steps) == (2.0, 3)


@pytest.mark.parametrize(("runtime", "session"), [
    ("", "units"),
    ("runtime: {providers: [CPUExecutionProvider, CUDAExecutionProvider]}\n", "units"),
    ("runtime: {providers: [CUDAExecutionProvider, CPUExecutionProvider]}\n", "auto"),
    ("runtime: {providers: [TensorrtExecutionProvider]}\n", "auto"),
    ("runtime: {providers: [CUDAExecutionProvider], session: units}\n", "units"),
    ("runtime: {providers: [CUDAExecutionProvider], session: one}\n", "one"),
    ("runtime: {session: auto}\n", "auto"),
])
def test_the_session_default_follows_the_first_provider(tmp_path: Path, runtime: str, session: str) -> None:
    """Left out, ``runtime.session`` is units on the CPU and auto (the build measures one graph against the units)
    where the first provider is a GPU one, whose every session holds a provider instance; given, it is kept."""
    _write_model(tmp_path / "m.onnx", [1, 3, 8, 8])
    (tmp_path / "app.yaml").write_text("name: d\ninput: {shape: [1, 3, 8, 8]}\nscenarios: [{name: only, model: m.onnx}]\n"
                                       + runtime)
    assert load_app_config(tmp_path / "app.yaml").runtime.session == session


# (description, edit of the app text or a file, expected message fragment, expected line or None)
BAD_CASES = [
    ("unknown top-level key", lambda d: _edit(d, "memory_limit_mb: 16", "memory_limt_mb: 16"),
     "memory_limt_mb: unknown key (allowed: adaptive, environment, initial, input, memory_limit_mb, metrics, name,"
     " policy, postprocess, runtime, scenarios, source)", 12),
    ("unknown scenario key", lambda d: _edit(d, "    model: big.onnx", "    model: big.onnx\n    modle: x"),
     "scenarios[0].modle: unknown key", 8),
    ("unknown key in scenario file", lambda d: _edit_file(d / "scenarios/small.yaml", "name: small", "name: small\nfoo: 1"),
     "small.yaml:2: foo: unknown key", None),
    ("wrong type", lambda d: _edit(d, "threads: 2", "threads: two"), "runtime.threads: Input should be a valid integer", 11),
    ("string for a number", lambda d: _edit(d, "fps: 15.4", "fps: '15.4'"), "characteristics.fps", 9),
    ("missing model file", lambda d: _edit(d, "model: big.onnx", "model: nope.onnx"),
     "scenarios[0].model: no such ONNX file: nope.onnx", 7),
    ("missing scenario file", lambda d: _edit(d, "file: scenarios/small.yaml", "file: scenarios/none.yaml"),
     "scenarios[1].file: no such scenario file", 10),
    ("weights not summing to 1", lambda d: _edit(d, "throughput: 0.3", "throughput: 0.2"),
     "scenarios[0].requirements: requirement weights must sum to 1, they sum to 0.9", 8),
    ("weight out of range", lambda d: _edit(d, "{accuracy: 0.7, throughput: 0.3}", "{accuracy: 1.3, throughput: -0.3}"),
     "scenarios[0].requirements.accuracy: Input should be less than or equal to 1", 8),
    ("input shape differs", lambda d: _edit(d, "shape: [1, 3, 8, 8]", "shape: [1, 3, 16, 16]"),
     "big.onnx: scenario 'big': input 'data' dim 2 is 8 in the model, the app's input.shape says 16", None),
    ("duplicate scenario names", lambda d: _edit_file(d / "scenarios/small.yaml", "name: small", "name: big"),
     "small.yaml:1: name: duplicate scenario name 'big'", None),
    ("unknown initial", lambda d: _edit(d, "initial: big", "initial: huge"), "initial: unknown scenario 'huge'", 4),
    ("adaptive outside {I, O, par}", lambda d: _edit(d, "adaptive: [I, O, par]", "adaptive: [I, O, weights]"),
     "adaptive[2]: Input should be 'I', 'O' or 'par'", 3),
    ("adaptive duplicate", lambda d: _edit(d, "adaptive: [I, O, par]", "adaptive: [I, I]"), "adaptive: duplicate", 3),
    ("two model sources", lambda d: _edit(d, "    model: big.onnx", "    model: big.onnx\n    zoo: {name: resnet18}"),
     "scenarios[0]: give exactly one of 'model'", 6),
    ("no model source", lambda d: _edit(d, "    model: big.onnx\n", ""), "scenarios[0]: give exactly one of", 6),
    ("unknown provider", lambda d: _edit(d, "[CPUExecutionProvider]", "[TPUExecutionProvider]"),
     "runtime.providers[0]: Input should be", 11),
    ("negative sharing threshold", lambda d: _edit(d, "transition: sbrs-tp}", "transition: sbrs-tp, share_min_mb: -1}"),
     "runtime.share_min_mb: Input should be greater than or equal to 0", 11),
    ("unknown threads scope", lambda d: _edit(d, "transition: sbrs-tp}", "transition: sbrs-tp, threads_scope: global}"),
     "runtime.threads_scope: Input should be 'session' or 'process'", 11),
    ("three streams", lambda d: _edit(d, "transition: sbrs-tp}", "transition: sbrs-tp, streams: 3}"),
     "runtime.streams: Input should be 1, 2 or 'auto'", 11),
    ("negative fps", lambda d: _edit(d, "fps: 15.4", "fps: -1"), "characteristics.fps: Input should be greater than 0", 9),
    # YAML's .inf passed every "> 0": the policy's scores became NaN, the build an OverflowError, sbrs run's
    # environment a late error naming no file
    ("infinite fps", lambda d: _edit(d, "fps: 15.4", "fps: .inf"),
     "scenarios[0].characteristics.fps: Input should be a finite number (got inf)", 9),
    ("infinite memory limit", lambda d: _edit(d, "memory_limit_mb: 16", "memory_limit_mb: .inf"),
     "memory_limit_mb: Input should be a finite number (got inf)", 12),
    ("infinite sharing threshold", lambda d: _edit(d, "transition: sbrs-tp}", "transition: sbrs-tp, share_min_mb: .inf}"),
     "runtime.share_min_mb: Input should be a finite number (got inf)", 11),
    ("infinite min_fps", lambda d: _edit(d, "memory_limit_mb: 16", "memory_limit_mb: 16\nenvironment: {min_fps: .inf}"),
     "environment.min_fps: Input should be a finite number (got inf)", 13),
    ("missing required key", lambda d: _edit(d, "name: demo\n", ""), "name: required key is missing", None),
    ("invalid YAML", lambda d: _edit(d, "initial: big", "initial: [big"), "invalid YAML", None),
    ("not a mapping", lambda d: (d / "app.yaml").write_text("- just\n- a list\n"), "expected a mapping", None),
    ("scenario not a mapping", lambda d: _edit(d, "  - file: scenarios/small.yaml", "  - small"),
     "scenarios[1]: Input should be a valid dictionary", 10),
    ("bad scenario name", lambda d: _edit(d, "  - name: big", "  - name: 'big one'"), "scenarios[0].name: String should match", 6),
    ("empty file", lambda d: (d / "app.yaml").write_text(""), "empty YAML document", None),
    ("duplicate key", lambda d: _edit(d, "initial: big", "initial: big\ninitial: big"), "initial: duplicate key", 5),
    ("input_size of three values", lambda d: _edit(d, "    model: big.onnx", "    model: big.onnx\n    input_size: [4, 4, 4]"),
     "scenarios[0].input_size: List should have at most 2 items", 8),
    ("input_size of zero pixels", lambda d: _edit(d, "    model: big.onnx", "    model: big.onnx\n    input_size: [0, 4]"),
     "scenarios[0].input_size[0]: Input should be greater than 0", 8),
    ("input_size without an image input", lambda d: (_edit(d, "shape: [1, 3, 8, 8]", "shape: [1, 192]"),
                                                    _edit(d, "    model: big.onnx", "    model: big.onnx\n    input_size: [4, 4]")),
     "scenarios[0].input_size: a scenario's own input size needs an image input", 8),
    ("input_size against a fixed model", lambda d: _edit_file(d / "scenarios/small.yaml", "name: small",
                                                              "name: small\ninput_size: [4, 4]"),
     "small.onnx: scenario 'small': input_size: the model's input 'data' dim 2 is 8, input_size says 4", None),
]


def _edit(directory: Path, old: str, new: str) -> None:
    _edit_file(directory / "app.yaml", old, new)


def _edit_file(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize(("edit", "fragment", "line"), [case[1:] for case in BAD_CASES],
                         ids=[case[0] for case in BAD_CASES])
def test_bad_input_is_one_line_and_exit_2(app_dir: Path, capsys: pytest.CaptureFixture[str], edit, fragment: str,
                                          line: int | None) -> None:
    edit(app_dir)
    status = main(["check", str(app_dir / "app.yaml")])
    err = capsys.readouterr().err
    assert status == 2, err
    assert_one_line_error(err, fragment, line)


def test_check_prints_figures(app_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(app_dir / "app.yaml")]) == 0
    out = capsys.readouterr().out
    assert "big" in out and "small" in out and "unique parameters" in out
