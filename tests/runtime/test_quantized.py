"""Quantized and fp16 scenarios through the whole pipeline (issue 23, part 1; docs/QUANTIZED.md).

An app holding one CNN at full precision, in every integer form and at fp16 builds its MoC, unit plan and
arena, runs every scenario equal to plain ONNX Runtime on the scenario's own file, switches between the
float32 and int8 scenarios at every step of a frame (SBRS-TP), and hands ONNX Runtime units that it runs
with its integer kernels. Processing by parts (``memory_limit_mb``) runs quantized layers by bands, float16
layers whole.
"""

from __future__ import annotations

import platform
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from sbrs.app import App, load_app
from sbrs.compile import build_unit_plan
from sbrs.compile.layout import unit_model
from sbrs.moc import derive_moc
from sbrs.model import fold_model, params_bytes
from sbrs.model.cnn import TensorSpec
from sbrs.runtime import runtime_for
from tests.runtime.conftest import References, assert_equivalent, assert_switch_at_steps_equal, random_frame

QUANTIZED = Path(__file__).resolve().parents[1] / "data" / "torchvision" / "quantized"
TORCHVISION = QUANTIZED.parent
INTEGER = ("qdq-per-tensor-u8", "qdq-per-channel-u8", "qdq-per-channel-s8", "qdq-contrib-u8", "qdq-contrib-u16",
           "qoperator", "dynamic")
FLOAT_IO_FP16 = ("fp16-onnxconverter", "fp16-ort")
HALF_IO_FP16 = ("fp16-onnxconverter-half-io", "fp16-ort-half-io")


def _app(folder: Path, name: str, models: dict[str, Path], dtype: str = "float32", extra: str = "") -> App:
    lines = [f"name: {name}", f"input: {{name: input, shape: [1, 3, 64, 64], dtype: {dtype}}}",
             "adaptive: [I, O, par]", f"initial: {next(iter(models))}", "scenarios:"]
    lines += [f"  - {{name: {scenario}, model: {path}}}" for scenario, path in models.items()]
    path = folder / f"{name}.yaml"
    path.write_text("\n".join(lines) + "\n" + extra, encoding="utf-8")
    return load_app(path)


@pytest.fixture(scope="module")
def mobilenet_app(quantized_zoo: Callable[..., Path], tmp_path_factory: pytest.TempPathFactory) -> App:
    forms = ("fp32", *INTEGER, *FLOAT_IO_FP16)
    return _app(tmp_path_factory.mktemp("quantized-app"), "mobilenet-forms",
                {form: quantized_zoo("mobilenet_v2", form) for form in forms})


def _assert_every_scenario_equals_onnx_runtime(app: App, seeds: tuple[int, ...] = (0, 1)) -> None:
    refs = References(app)
    with runtime_for(app) as runtime:
        for scenario in runtime.scenarios:
            runtime.switch(scenario)
            for seed in seeds:
                frame = random_frame(app, seed)
                got = runtime.infer(frame)
                assert runtime.scenario == scenario
                want = refs.outputs(scenario, frame)
                assert {k: v.dtype for k, v in got.items()} == {k: v.dtype for k, v in want.items()}
                assert_equivalent({k: v.astype(np.float32) for k, v in got.items()},
                                  {k: v.astype(np.float32) for k, v in want.items()}, f"{scenario} frame {seed}")


def test_every_form_of_one_cnn_runs_equal_to_onnx_runtime_in_one_app(mobilenet_app: App) -> None:
    _assert_every_scenario_equals_onnx_runtime(mobilenet_app)


def test_resnet18_forms_and_half_io_apps_run_equal_to_onnx_runtime(quantized_zoo: Callable[..., Path],
                                                                   tmp_path: Path) -> None:
    forms = ("fp32", "qdq-per-channel-s8", "qoperator", "dynamic", "fp16-onnxconverter")
    _assert_every_scenario_equals_onnx_runtime(_app(tmp_path, "resnet-forms", {
        form: quantized_zoo("resnet18", form) for form in forms}), seeds=(0,))
    # float16 in and out: both converters' models are equal but for a few weights, so they share most layers
    # in the MoC; each still runs as one unit of its own (ONNX Runtime computes float16 in float32 inside a
    # session: a unit boundary would round)
    half = _app(tmp_path, "resnet-half", {form: quantized_zoo("resnet18", form) for form in HALF_IO_FP16},
                dtype="float16")
    plan = build_unit_plan(half)
    assert all(len(sequence) == 1 for sequence in plan.sequences.values())
    _assert_every_scenario_equals_onnx_runtime(half, seeds=(0,))


def test_a_build_of_quantized_scenarios_runs_equal_to_onnx_runtime(quantized_zoo: Callable[..., Path],
                                                                   tmp_path: Path) -> None:
    """``sbrs build`` writes the units with their weights in weights.bin (scales and zero points as scalars)
    and ``sbrs run`` opens them from there."""
    from sbrs.cli import main

    forms = ("fp32", "qdq-per-channel-s8", "qoperator", "fp16-ort")
    app = _app(tmp_path, "built", {form: quantized_zoo("mobilenet_v2", form) for form in forms})
    assert main(["build", app.config.path, "--json"]) == 0
    assert (tmp_path / "built.build").is_dir()
    _assert_every_scenario_equals_onnx_runtime(load_app(app.config.path), seeds=(0,))


def test_committed_torchvision_forms_run_equal_to_onnx_runtime(tmp_path: Path) -> None:
    for stem in ("mobilenet_v3_small-legacy-64", "shufflenet_v2_x0_5-legacy-64"):
        files = {path.stem.removeprefix(stem + "-").replace("-", "_"): path
                 for path in sorted(QUANTIZED.glob(f"{stem}-*.onnx")) if "half-io" not in path.stem}
        app = _app(tmp_path, stem.split("-")[0], {"fp32": TORCHVISION / f"{stem}.onnx", **files})
        _assert_every_scenario_equals_onnx_runtime(app, seeds=(0,))
    half = _app(tmp_path, "shufflenet-half", {
        "fp16": QUANTIZED / "shufflenet_v2_x0_5-legacy-64-fp16-onnxconverter-half-io.onnx"}, dtype="float16")
    _assert_every_scenario_equals_onnx_runtime(half, seeds=(0,))


@pytest.mark.parametrize("int8", ["qdq-per-channel-u8", pytest.param("qoperator", marks=pytest.mark.slow),
                                  pytest.param("dynamic", marks=pytest.mark.slow)])  # each form's import: fast tier
def test_switching_between_fp32_and_int8_keeps_every_frame_equal(mobilenet_app: App, int8: str) -> None:
    refs = References(mobilenet_app)
    frames = [random_frame(mobilenet_app, k) for k in range(3)]
    with runtime_for(mobilenet_app, transition="sbrs-tp") as runtime:
        for old, new in (("fp32", int8), (int8, "fp32")):
            steps = range(1, len(runtime.plan.sequences[old]) + 1)
            assert_switch_at_steps_equal(runtime, refs, frames, old, new, steps)


def _kernels(model: onnx.ModelProto | str, path: Path) -> Counter[str]:
    """The ops of the graph ONNX Runtime runs for ``model`` (its optimized model, written to ``path``)."""
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(path)
    options.log_severity_level = 3
    ort.InferenceSession(model if isinstance(model, str) else model.SerializeToString(), options,
                         providers=["CPUExecutionProvider"])
    return Counter(node.op_type for node in onnx.load(path).graph.node)


@pytest.mark.parametrize("granularity", ["auto", pytest.param("layer", marks=pytest.mark.slow)])  # ~130 sessions
def test_int8_units_run_on_the_integer_kernels_plain_onnx_runtime_uses(mobilenet_app: App, tmp_path: Path,
                                                                       granularity: str) -> None:
    """What ONNX Runtime makes of the units of a QDQ scenario: as many QLinearConv (its QDQ fusion) as it
    makes of the file itself. With uint8 activations that is every convolution, even with one unit per layer
    (units are cut on quantized tensors only, where the fused kernels read and write). With int8 activations
    ONNX Runtime fuses 37 of 52 and the scenario runs as one unit (``sbrs.compile.layout._whole_steps``)."""
    moc = derive_moc(mobilenet_app.models, mobilenet_app.config.adaptive)
    plan = build_unit_plan(mobilenet_app, granularity, moc=moc)
    specs = {t.id: TensorSpec(t.shape, t.dtype) for t in plan.tensors}
    units = {unit.id: unit for unit in plan.units}
    files = {s.name: s.model_path for s in mobilenet_app.config.scenarios}
    scenarios = ("qdq-per-tensor-u8", "qdq-per-channel-u8") + (("qdq-per-channel-s8",) if granularity == "auto" else ())
    for scenario in scenarios:
        ops: Counter[str] = Counter()
        sequence = plan.sequences[scenario]
        assert len(sequence) > 60 if granularity == "layer" else len(sequence) >= 1
        for unit_id in sequence:
            unit = units[unit_id]
            for tensor in unit.outputs:
                if tensor not in plan.outputs[scenario].values():
                    assert specs[tensor].dtype in ("uint8", "int8"), (scenario, unit_id, tensor)
            ops += _kernels(unit_model(mobilenet_app.models, moc, unit, specs, mobilenet_app.name),
                            tmp_path / f"{scenario}-{unit_id}.onnx")
        plain = _kernels(str(files[scenario]), tmp_path / f"{scenario}.onnx")
        assert ops["QLinearConv"] == plain["QLinearConv"] == (37 if scenario.endswith("s8") else 52), scenario
        assert ops["Conv"] == plain["Conv"], scenario
    if granularity == "layer":
        refs = References(mobilenet_app)
        frame = random_frame(mobilenet_app, 5)
        with runtime_for(mobilenet_app, granularity="layer") as runtime:
            for scenario in scenarios:
                runtime.switch(scenario)
                got = runtime.infer(frame)
                want = refs.outputs(scenario, frame)
                assert all(np.array_equal(got[k], want[k]) for k in want), scenario


def test_the_plan_holds_quantized_tensors_at_their_own_size_and_each_weight_once(mobilenet_app: App) -> None:
    plan = build_unit_plan(mobilenet_app, "layer")
    dtypes = {t.id: t.dtype for t in plan.tensors}
    for scenario in ("qdq-per-channel-u8", "qoperator"):
        units = [unit for unit in plan.units if scenario in unit.scenarios]
        crossing = {t for unit in units for t in unit.outputs} - set(plan.outputs[scenario].values())
        assert crossing and {dtypes[t] for t in crossing} <= {"uint8", "int8"}
    with runtime_for(mobilenet_app) as runtime:
        report = runtime.memory_report()
    # parameters as ONNX Runtime executes them: float BN folded into its convolution, quantized layers as they are
    assert report["params_bytes"] == params_bytes(fold_model(model) for model in mobilenet_app.models.values())
    quantized = {s: params_bytes([fold_model(mobilenet_app.models[s])]) for s in INTEGER}
    assert quantized == {s: params_bytes([mobilenet_app.models[s]]) for s in INTEGER}


def _int8_sums_saturate() -> bool:
    """Whether ONNX Runtime's fused int8 convolutions may saturate on this CPU: on x86 without VNNI they multiply
    with VPMADDUBSW, whose int16 pair sums saturate (ONNX Runtime's quantization docs), so on such a CPU a
    QLinearConv that ORT fuses from the file's int8 QDQ pattern can differ from the same arithmetic unfused."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    flags = Path("/proc/cpuinfo").read_text(encoding="ascii", errors="replace") if Path("/proc/cpuinfo").exists() else ""
    return not any(flag in flags.split() for flag in ("avx512_vnni", "avx_vnni", "amx_int8"))


@pytest.mark.parametrize("form", ["qdq-per-tensor-u8", "qdq-per-channel-u8", pytest.param(
    "qdq-per-channel-s8", marks=pytest.mark.xfail(_int8_sums_saturate(), strict=False, reason=(
        "x86 without VNNI: ONNX Runtime's fused int8-activation kernels saturate (VPMADDUBSW) and band calls are "
        "fused differently (docs/QUANTIZED.md)"))), "qdq-contrib-u8",
                                  "qdq-contrib-u16", "qoperator"])
def test_processing_by_parts_runs_quantized_layers_by_bands(quantized_zoo: Callable[..., Path], tmp_path: Path,
                                                            form: str) -> None:
    """A QDQ node unit runs by bands like its float op (each band call holds the Q/DQ nodes, ONNX Runtime fuses
    them into its integer kernel there; the line buffers hold the quantized tensors), and so does the QOperator
    form's QLinearConv (ONNX Runtime pads with the zero point in a band as whole): 1-row bands everywhere and
    every block tiled, each equal to ONNX Runtime on the file; the s8 form only where ONNX Runtime's fused int8
    kernels do not saturate (``_int8_sums_saturate``; an expected failure elsewhere, docs/QUANTIZED.md). float16
    layers still run whole: a band boundary
    would round what ONNX Runtime keeps in float32; so do 16-bit QDQ units, which ONNX Runtime runs in float32
    (``sbrs.reduction.rows.is_row_local``)."""
    from sbrs.compile.parts import executable_bands
    from sbrs.reduction import maximal_bands
    from sbrs.reduction.rows import layer_height
    from sbrs.reduction.tiles import tile_groups
    from sbrs.runtime.engine import Runtime

    app = _app(tmp_path, "by-parts", {"int8": quantized_zoo("mobilenet_v2", form)})
    int8 = fold_model(app.models["int8"])
    bands = executable_bands(int8, {layer.name: 1 for layer in int8.compute_layers})
    quantized = [layer for layer in int8.compute_layers
                 if (layer.qdq is not None and layer.op == "Conv") or layer.op == "QLinearConv"]
    refs = References(app)
    frame = random_frame(app, 5)
    if form.endswith("u16"):  # ONNX Runtime runs 16-bit units in float32: whole, as float16 layers (below)
        assert quantized and all(bands[layer.name] == layer_height(layer) for layer in quantized)
        with Runtime.from_models({"int8": int8}, {"int8": maximal_bands(int8)}) as runtime:
            assert_equivalent(runtime.infer(frame), refs.outputs("int8", frame), f"{form} by parts")
        return
    assert quantized and all(bands[layer.name] < layer_height(layer) for layer in quantized)
    tiles = {"int8": [(group, 1) for group in tile_groups(int8)]}
    want = refs.outputs("int8", frame)
    for label, kwargs in (("1-row bands", {}), ("tiles", {"tiles": tiles})):
        with Runtime.from_models({"int8": int8}, {"int8": maximal_bands(int8)}, **kwargs) as runtime:
            parts = runtime.plan.scenarios["int8"]  # type: ignore[union-attr]
            assert len(parts.calls) > 20 and any(b.dtype in ("uint8", "int8", "uint16") and b.layout == "rows"
                                                 for b in parts.buffers)
            assert_equivalent(runtime.infer(frame), want, f"{form} by parts, {label}")
    fp16 = _app(tmp_path, "by-parts-half", {"fp16": quantized_zoo("resnet18", "fp16-ort")}).models["fp16"]
    bands = executable_bands(fp16, {layer.name: 1 for layer in fp16.compute_layers})
    assert all(bands[layer.name] == layer_height(layer) for layer in fp16.compute_layers)


def test_an_app_with_int8_and_fp16_scenarios_runs_by_parts_within_its_memory_limit(quantized_zoo: Callable[..., Path],
                                                                            tmp_path: Path) -> None:
    from sbrs.cli import main

    models = {"fp32": quantized_zoo("mobilenet_v2", "fp32"), "int8": quantized_zoo("mobilenet_v2", "qdq-per-channel-u8"),
              "fp16": quantized_zoo("mobilenet_v2", "fp16-onnxconverter")}
    app = _app(tmp_path, "by-parts-run", models)
    limit_mb = round(params_bytes(app.models.values()) / 1e6 + 0.35, 2)  # the fp32 scenario's buffers must shrink
    app = _app(tmp_path, "by-parts-run", models, extra=f"memory_limit_mb: {limit_mb}\n")
    assert main(["build", str(tmp_path / "by-parts-run.yaml"), "--json", "--generations", "6", "--population", "12",
                 "--cost", "analytic"]) == 0
    app = load_app(tmp_path / "by-parts-run.yaml")
    refs = References(app)
    with runtime_for(app) as runtime:
        report = runtime.memory_report()
        assert report["execution"] == "parts" and report["within_limit"]
        for scenario in ("int8", "fp32", "fp16", "int8"):
            runtime.switch(scenario)
            frame = random_frame(app, 3)
            assert_equivalent(runtime.infer(frame), refs.outputs(scenario, frame), f"by parts: {scenario}")


@pytest.mark.parametrize("form", ["qdq-per-channel-u8", "qdq-per-channel-s8"])
def test_two_int8_heads_on_one_backbone_share_it_and_stay_equal(quantized_zoo: Callable[..., Path], tmp_path: Path,
                                                                form: str) -> None:
    """The zoo's MobileNetV2 with 1000 and 10 classes (same seeded backbone) quantized on the same frames: the
    MoC shares the quantized backbone either way. With uint8 activations it is one shared unit, cut from the
    heads on a uint8 tensor; with int8 activations each scenario runs its own copy (a boundary on an int8
    tensor would cost ONNX Runtime's fusion). Each scenario equals ONNX Runtime on its own file, also when
    switching between them."""
    app = _app(tmp_path, "heads", {f"classes{n}": quantized_zoo("mobilenet_v2", form, classes=n)
                                   for n in (1000, 10)})
    moc = derive_moc(app.models, app.config.adaptive)
    assert sum(len(layer.scenarios) == 2 and layer.qdq is not None for layer in moc.layers) >= 52
    plan = build_unit_plan(app, moc=moc)
    shared = [unit for unit in plan.units if len(unit.scenarios) == 2]
    if form.endswith("u8"):
        assert shared and all(t.dtype == "uint8" for t in plan.tensors if any(t.id in u.outputs for u in shared))
    else:
        assert not shared and all(len(sequence) == 1 for sequence in plan.sequences.values())
    _assert_every_scenario_equals_onnx_runtime(app)
    refs = References(app)
    frames = [random_frame(app, k) for k in range(3)]
    with runtime_for(app, transition="sbrs-tp") as runtime:
        for old, new in (("classes1000", "classes10"), ("classes10", "classes1000")):
            steps = range(1, len(runtime.plan.sequences[old]) + 1)
            assert_switch_at_steps_equal(runtime, refs, frames, old, new, steps)
