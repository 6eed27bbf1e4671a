"""Scenarios derived from another at another precision: ``from: SCENARIO`` with ``quantize: {mode: ...}``.

The source scenario's ONNX file (its own, or the cached export of its ``zoo:``/``layers:``) is converted by
ONNX Runtime's tools (``sbrs.model.precision``) into the cache (``sbrs.cache.cached_file``, kind ``derived``),
under a key of everything the result depends on: the source file's content, the mode, the calibration
frames' content (or the synthetic frames' recipe), the app's input, and the onnxruntime version whose
quantizer made it. A second load with the same inputs reuses the file; a changed source or frame quantizes
again. The derived scenario then is a scenario like any other: its file is imported, merged and built.

Calibration (``int8-static``): the ``.npy`` files of ``quantize.calibration`` (a folder relative to the file
that declares the scenario), in name order, each one frame of the app's input shape and dtype; their headers
are checked at every load (an error names the field and the file), their arrays are read only to quantize.
Without ``calibration`` the model is calibrated on seeded synthetic frames and a warning says so: the
quantization ranges then fit noise, not images, and the scenario's accuracy is not representative.

Derived scenarios cannot be derived from again (no chains): the source must have a model of its own. The
derived scenario keeps the source's other settings (``dataclasses.replace``), its post-processing when it names
none, and anything a later field of a scenario adds (an input size, say) follows the source the same way.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sbrs import digest
from sbrs.app.config import DeclaredCharacteristics, InputSpec, RequirementSet, ScenarioConfig
from sbrs.cache import cached_file, content_key

if TYPE_CHECKING:
    from sbrs.app.schema import AppEntry, ScenarioEntry
    from sbrs.app.yaml_lines import LocatedYaml, Path_

logger = logging.getLogger(__name__)

#: Bump when what a derivation writes changes for the same inputs (the cache key includes it).
DERIVE_VERSION = 1
#: Synthetic calibration frames when ``quantize.calibration`` is not given (seeded: the same model every time).
SYNTHETIC_FRAMES = 8
SYNTHETIC_SEED = 0
#: The calibration files of a folder (``sbrs.artifact.write`` records the folder's listing by this pattern).
CALIBRATION_GLOB = "*.npy"


#: The .npy header readers of numpy's public API, by format version (3.0 only differs for unicode field names).
_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def calibration_files(folder: Path) -> list[Path]:
    """The calibration frames of ``folder``, in name order."""
    return sorted(path for path in folder.glob(CALIBRATION_GLOB) if path.is_file())


def _check_frames(folder: Path, written: str, spec: InputSpec, doc: LocatedYaml,
                  field: Path_) -> list[tuple[str, str]]:
    """(name, sha256) of each frame file of ``folder``, after checking each is one frame of the app's input."""
    if not folder.is_dir():
        raise doc.error(field, f"no such folder of calibration frames: {written}")
    files = calibration_files(folder)
    if not files:
        raise doc.error(field, f"no .npy files in {written} (one frame of shape {list(spec.shape)} {spec.dtype} "
                               "per file)")
    expected = np.dtype(spec.dtype)
    records = []
    for path in files:
        data = path.read_bytes()
        try:
            stream = io.BytesIO(data)
            version = np.lib.format.read_magic(stream)
            if version not in _HEADER_READERS:
                raise ValueError(f"format version {version[0]}.{version[1]}")
            shape, _, dtype = _HEADER_READERS[version](stream)  # the header only: the arrays wait for produce()
        except (ValueError, OSError, SyntaxError) as exc:
            raise doc.error(field, f"{written}/{path.name} is not a readable .npy file ({exc})") from None
        if tuple(shape) != spec.shape or np.dtype(dtype) != expected:
            raise doc.error(field, f"{written}/{path.name} holds {list(shape)} {np.dtype(dtype)}; a calibration "
                                   f"frame is one app input, {list(spec.shape)} {spec.dtype}")
        records.append((path.name, digest.sha256(data).hexdigest()))
    return records


def synthetic_frames(spec: InputSpec, count: int = SYNTHETIC_FRAMES, seed: int = SYNTHETIC_SEED) -> list[np.ndarray]:
    """Seeded frames of the app's input: standard normal values for a float input (a normalised image's
    range), 0-255 for an integer one (raw pixels)."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(spec.dtype)
    if dtype.kind == "f":
        return [rng.standard_normal(spec.shape).astype(dtype) for _ in range(count)]
    info = np.iinfo(dtype)
    low, high = max(int(info.min), 0), min(int(info.max), 255)
    return [rng.integers(low, high, size=spec.shape, endpoint=True).astype(dtype) for _ in range(count)]


def _source(entry: ScenarioEntry, entries: Sequence[tuple[ScenarioEntry, LocatedYaml, Path_]],
            resolved: Mapping[str, ScenarioConfig], doc: LocatedYaml, path: Path_) -> ScenarioConfig:
    names = [item[0].name for item in entries]
    name = entry.from_
    if name not in names:
        raise doc.error((*path, "from"), f"unknown scenario '{name}' (scenarios: {', '.join(names)})")
    source = next(item[0] for item in entries if item[0].name == name)
    if source.from_ is not None:
        raise doc.error((*path, "from"), f"scenario '{name}' is itself derived (from: {source.from_}); derive "
                                         f"from a scenario with a model of its own, such as '{source.from_}'")
    return resolved[name]


def derive_scenario(entry: ScenarioEntry, entries: Sequence[tuple[ScenarioEntry, LocatedYaml, Path_]],
                    resolved: Mapping[str, ScenarioConfig], app: AppEntry, doc: LocatedYaml,
                    path: Path_) -> ScenarioConfig:
    """The scenario of ``entry`` (``from:`` + ``quantize:``), its model derived into the cache (module
    docstring); ``resolved`` holds every scenario with a model of its own."""
    import onnxruntime

    from sbrs.app.postprocess import resolve_postprocess
    from sbrs.model.precision import convert_fp16, quantize_int8_static

    source = _source(entry, entries, resolved, doc, path)
    assert entry.quantize is not None  # the schema pairs it with ``from``
    mode, written = entry.quantize.mode, entry.quantize.calibration
    spec = InputSpec(app.input.name, tuple(app.input.shape), app.input.dtype)
    field: Path_ = (*path, "quantize", "calibration")
    folder = None if written is None else (Path(doc.file).parent / written).resolve()
    if mode != "int8-static":
        frames_key: object = None
    elif folder is not None:
        frames_key = _check_frames(folder, written or "", spec, doc, field)
    else:
        frames_key = ("synthetic", SYNTHETIC_FRAMES, SYNTHETIC_SEED)
        where = f"{doc.file}:{doc.line_of((*path, 'quantize'))}"
        logger.warning("%s: scenario '%s': no quantize.calibration folder given; calibrating on %d synthetic "
                       "frames only, so its int8 accuracy is not representative", where, entry.name,
                       SYNTHETIC_FRAMES)
    source_path = Path(source.model_path)
    with open(source_path, "rb") as stream:
        source_sha = digest.file_sha256(stream)

    def produce() -> bytes:
        from sbrs.errors import InputError

        logger.info("scenario '%s': deriving %s from scenario '%s'", entry.name, mode, source.name)
        try:
            if mode == "fp16":
                return convert_fp16(source_path)
            frames = (synthetic_frames(spec) if folder is None else
                      (np.load(file, allow_pickle=False) for file in calibration_files(folder)))
            return quantize_int8_static(source_path, frames)
        except InputError as exc:
            raise doc.error((*path, "quantize"), exc.detail) from None

    key = content_key("derive", DERIVE_VERSION, mode, source_sha, frames_key, spec.name, spec.shape, spec.dtype,
                      onnxruntime.__version__)
    model_path = cached_file("derived", f"{source_path.stem}-{mode}", key, produce)
    return replace(
        source, name=entry.name, defined_in=doc.file, model_kind="derived", model_path=str(model_path),
        requirements=RequirementSet(**entry.requirements.model_dump()),
        characteristics=DeclaredCharacteristics(**entry.characteristics.model_dump()),
        postprocess=source.postprocess if entry.postprocess is None else
        resolve_postprocess(entry.postprocess, doc, (*path, "postprocess"), "scenario"),
        derived_from=source.name, quantize=mode, calibration=None if folder is None else str(folder),
        input_size=source.input_size if entry.input_size is None else (int(entry.input_size[0]),
                                                                         int(entry.input_size[1])))
