"""Stage 6 of the data flow: the compiled build of an app (``APP.build/``): written by ``write``, read back and
verified by ``read``."""

from typing import TYPE_CHECKING

from sbrs._lazy import lazy_exports

if TYPE_CHECKING:
    from sbrs.artifact.read import LoadedBuild, build_dir, load_build

__all__ = ["LoadedBuild", "build_dir", "load_build"]

__getattr__, __dir__ = lazy_exports(globals(), {
    "LoadedBuild": "sbrs.artifact.read",
    "build_dir": "sbrs.artifact.read",
    "load_build": "sbrs.artifact.read",
})
