"""Stage 6 of the data flow: the compiled build of an app (``APP.build/``). ``build`` runs the build sequence
(``build_app``: plan, search under a memory limit, compile, write), ``write`` writes the folder, ``read``
verifies and loads it, ``child`` builds in a child process for a process that serves frames (``ensure_build``:
the build a run starts from, made first when missing)."""

from typing import TYPE_CHECKING

from sbrs._lazy import lazy_exports

if TYPE_CHECKING:
    from sbrs.artifact.build import BuildResult, build_app
    from sbrs.artifact.read import LoadedBuild, build_dir, load_build

__all__ = ["BuildResult", "LoadedBuild", "build_app", "build_dir", "load_build"]

__getattr__, __dir__ = lazy_exports(globals(), {
    "BuildResult": "sbrs.artifact.build",
    "build_app": "sbrs.artifact.build",
    "LoadedBuild": "sbrs.artifact.read",
    "build_dir": "sbrs.artifact.read",
    "load_build": "sbrs.artifact.read",
})
