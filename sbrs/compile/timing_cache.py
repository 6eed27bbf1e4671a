"""The build's timings, made once per machine and unit files: the units' threads and ``runtime.streams: auto``.

A build measures two things on this machine (``sbrs.compile.unit_threads``, ``sbrs.compile.unit_streams``). Timed
afresh at every build, the same app could build with one stream here and two there within a minute on a loaded
machine, and so with a different plan and manifest: a rebuild would not reproduce its build. So, as TensorRT keeps a
timing cache and ``sbrs.compile.costs`` its cost table, the figures are kept under ``sbrs.cache.cache_dir("timings")``,
keyed by what they depend on: the bytes of the build's portable unit files and weights, the settings of the
measurement, the machine (``sbrs.ort_env.machine_key``: onnxruntime, CPU flags, providers) and its cores, and
``TIMINGS`` (the measuring method). A later build of the same units on this machine takes them from there.

Figures measured on a busy machine (load average above its cores) are remeasured by the first build that finds the
machine quiet, and kept otherwise: a build on a loaded machine reproduces the one before it rather than adding noise.
Deleting the folder makes every build measure again.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sbrs.cache import cache_dir, content_key, write_atomic
from sbrs.errors import InputError

#: The measuring method: a change to how figures are taken changes this, so older figures are not reused (2: each
#: block of one stream after an untimed frame, the best of the blocks, plain ONNX Runtime timed once its threads slept;
#: 3: the units against the one graph of ``runtime.session: auto`` measured the same way, and every session's
#: threads asleep from its creation, ``sbrs.ort_env.park_threads``; 4: units that keep ONNX Runtime's blocked layout
#: between them, ``sbrs.compile.blocked_layout``).
TIMINGS = "units-streams-4"
#: A machine is busy when its load average is above this many times its cores: its figures are that machine's
#: (on this 2-core machine at load 9-10, drone's ResNet-18 scenarios ran 1.70x on two streams; quiet, they win
#: nothing).
BUSY_LOAD = 1.0


@dataclass(frozen=True)
class Timing:
    """Figures as measured (``figures``, JSON), the machine's 1-minute load average when the measuring began
    (``load``, None where unknown) and whether they come from the cache (``cached``)."""

    figures: Any
    load: float | None
    cached: bool


def load_average() -> float | None:
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def is_busy(load: float | None, cores: int | None = None) -> bool:
    """Whether a machine at ``load`` (1-minute load average) is busier than it has cores (``BUSY_LOAD``)."""
    return load is not None and load > BUSY_LOAD * (cores or os.cpu_count() or 1)


def files_digest(paths: Iterable[Path]) -> str:
    """SHA-256 of the files' names and bytes, in the order given."""
    from sbrs.digest import sha256

    digest = sha256()
    for path in paths:
        digest.update(path.name.encode() + b"\0")
        with open(path, "rb") as stream:
            while block := stream.read(1 << 20):
                digest.update(block)
    return digest.hexdigest()


def timing_path(kind: str, *key: Any) -> Path:
    """Where the figures of ``kind`` for ``key`` (JSON-serialisable parts) are cached on this machine."""
    return cache_dir("timings") / f"{kind}-{content_key(TIMINGS, os.cpu_count(), *key)}.json"


def measured_once(path: Path, measure: Callable[[], Any]) -> Timing:
    """The figures at ``path`` where they are there and were measured on a machine as quiet as this one is now, else
    ``measure()`` now (its figures, JSON, written to ``path``). A cache entry that cannot be read is measured again;
    one that cannot be written leaves the figures unkept (the build goes on)."""
    load = load_average()
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        kept_load = entry["load"]
        if not is_busy(kept_load) or is_busy(load):
            return Timing(entry["figures"], kept_load, cached=True)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    figures = measure()
    with contextlib.suppress(InputError):  # an unwritable cache costs the next build a measurement, nothing else
        write_atomic(path, json.dumps({"load": load, "figures": figures}).encode("utf-8"))
    return Timing(figures, load, cached=False)
