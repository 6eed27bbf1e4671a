"""Scenarios derived from another at another precision: ``from: SCENARIO`` with ``quantize: {mode: ...}``.

The source scenario's ONNX file (its own, or the cached export of its ``zoo:``/``layers:``) is converted by
ONNX Runtime's tools (``sbrs.model.precision``) into the cache (``sbrs.cache.cached_file``, kind ``derived``),
under a key of everything the result depends on: the source file's content, the mode, the calibration
frames' content (and for images Pillow's version, the resampling library and the pre-processing; or the
synthetic frames' recipe), the app's input, and the
onnxruntime version whose quantizer made it. A second load with the same inputs reuses the file; a changed
source or frame quantizes again. The derived scenario then is a scenario like any other: its file is
imported, merged and built.

Calibration (``int8-static``): the frames of ``quantize.calibration`` (a folder relative to the file that
declares the scenario), read as ``sbrs run --input`` reads a folder (``sbrs.app.frames``): its ``.npy`` files,
or its images pre-processed for the app's input (``input.preprocess``), every one of them, in name order. Every file is
checked at every load (a ``.npy`` header, an image's header and integrity; an error is one line naming the
field and the file), the frames are read only to quantize. Without ``calibration`` the model is calibrated
on seeded synthetic frames and a warning says so: the quantization ranges then fit noise, not images, and the
scenario's accuracy is not representative.

Derived scenarios cannot be derived from again (no chains): the source must have a model of its own. The
derived scenario keeps the source's other settings (``dataclasses.replace``), its post-processing when it names
none, and anything a later field of a scenario adds (an input size, say) follows the source the same way.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sbrs import digest
from sbrs.app.frames import FRAME_GLOBS, folder_frames, frame_files
from sbrs.app.settings import DeclaredCharacteristics, InputSpec, RequirementSet, ScenarioConfig
from sbrs.cache import cached_file, content_key
from sbrs.errors import InputError

if TYPE_CHECKING:
    from sbrs.app.schema import AppEntry, ScenarioEntry
    from sbrs.app.yaml_lines import LocatedYaml, Path_

logger = logging.getLogger(__name__)

#: Bump when what a derivation writes changes for the same inputs (the cache key includes it).
DERIVE_VERSION = 1
#: Synthetic calibration frames when ``quantize.calibration`` is not given (seeded: the same model every time).
SYNTHETIC_FRAMES = 8
SYNTHETIC_SEED = 0
#: The calibration files of a folder as patterns (``sbrs.artifact.write`` records the folder's listing by each):
#: its ``.npy`` files and its images (``sbrs.app.frames.FRAME_GLOBS``).
CALIBRATION_GLOBS = FRAME_GLOBS


def calibration_files(folder: Path) -> list[Path]:
    """The calibration frames of ``folder``, in name order: its ``.npy`` files, else its images."""
    return frame_files(folder)


def _check_frames(folder: Path, written: str, spec: InputSpec, doc: LocatedYaml,
                  field: Path_) -> tuple[object, Iterator[np.ndarray]]:
    """The cache key's record of the frames of ``folder`` (each file's name and sha256; for images, Pillow's
    version, the library that resizes them and the app's ``input.preprocess`` too: they make the frames) and
    the frames, every file checked as ``sbrs run --input``
    checks it (``sbrs.app.frames``)."""
    if not folder.is_dir():
        raise doc.error(field, f"no such folder of calibration frames: {written}")
    try:
        frames = folder_frames(Path(doc.file).parent / written, spec, field="quantize.calibration")
    except InputError as exc:
        raise doc.error(field, _as_written(exc.detail, doc)) from None
    files = calibration_files(folder)
    records = []
    for path in files:
        with open(path, "rb") as stream:
            records.append((path.name, digest.file_sha256(stream)))
    if files[0].suffix == ".npy":
        return records, frames
    import PIL  # folder_frames has read the images with it

    from sbrs.app.preprocess import resampler

    return ("images", PIL.__version__, resampler(), asdict(spec.preprocess), records), frames


def _as_written(detail: str, doc: LocatedYaml) -> str:
    """A reader's error about ``<the YAML file's folder>/<calibration>/<file>`` with the path as the YAML writes
    it, relative to its file's folder (the error names that file already)."""
    base = str(Path(doc.file).parent)
    return detail if base == "." else detail.removeprefix(base + os.sep)


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


def derivation_source(entry: ScenarioEntry, entries: Sequence[tuple[ScenarioEntry, LocatedYaml, Path_]],
                      resolved: Mapping[str, ScenarioConfig], doc: LocatedYaml, path: Path_) -> ScenarioConfig:
    """The scenario ``entry`` derives from (``from:``), or the one-line error naming its ``from`` field."""
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
                    path: Path_, *, input_spec: InputSpec | None = None) -> ScenarioConfig:
    """The scenario of ``entry`` (``from:`` + ``quantize:``), its model derived into the cache (module
    docstring); ``resolved`` holds every scenario with a model of its own; ``input_spec``: the app's input
    with its pre-processing (default: ``app``'s input, pre-processed by default)."""
    import onnxruntime

    from sbrs.app.postprocess import resolve_postprocess
    from sbrs.model.precision import convert_fp16, quantize_int8_static

    source = derivation_source(entry, entries, resolved, doc, path)
    assert entry.quantize is not None  # the schema pairs it with ``from``
    mode, written = entry.quantize.mode, entry.quantize.calibration
    spec = input_spec or InputSpec(app.input.name, tuple(app.input.shape), app.input.dtype)
    field: Path_ = (*path, "quantize", "calibration")
    folder = None if written is None else (Path(doc.file).parent / written).resolve()
    calibration_frames: Iterator[np.ndarray] | None = None
    if mode != "int8-static":
        frames_key: object = None
    elif folder is not None:
        frames_key, calibration_frames = _check_frames(folder, written or "", spec, doc, field)
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
        logger.info("scenario '%s': deriving %s from scenario '%s'", entry.name, mode, source.name)
        unreadable: list[InputError] = []  # a frame the quantizer asked for and could not have

        def frames() -> Iterator[np.ndarray]:
            try:
                yield from synthetic_frames(spec) if calibration_frames is None else calibration_frames
            except InputError as exc:
                unreadable.append(exc)
                raise

        try:
            if mode == "fp16":
                return convert_fp16(source_path)
            return quantize_int8_static(source_path, frames())
        except InputError as exc:
            if unreadable:  # the quantizer's own error would only say that it failed
                raise doc.error(field, _as_written(unreadable[0].detail, doc)) from None
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
