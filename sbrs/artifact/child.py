"""Building in a child process, so that the process that serves frames never holds what building needs.

Building parses every model, imports onnx, pydantic and YAML and keeps the models' weights while it writes:
memory that a device running ``sbrs run`` would pay for as long as the run lasts. ``sbrs run`` and
``sbrs.runtime_for(path)`` therefore build a missing build with :func:`build_in_child` (:func:`ensure_build`: the
app's build folder, built first when there is none), which runs this module
(``python -m sbrs.artifact.child APP.yaml``): it calls ``sbrs.artifact.build.build_app`` and answers on its
stdout in JSON lines, one object per line:

- ``{"log": {"name", "level", "message"}}`` for every record of the ``sbrs`` loggers at or above the level
  asked (``--level``), which the parent logs again through its own loggers, as they come (progress included);
- then ``{"result": ...}`` (``BuildResult.to_dict``) or ``{"error": {"kind", "message", "detail", "file",
  "line", "field"}}``, which the parent raises again as the same exception type (``InputError``,
  ``SbrsRuntimeError``; anything else is an internal error, ``SbrsRuntimeError``).

The child's stderr (ONNX Runtime's own messages, a traceback) is drained as it comes; its last line is the
message when a child dies without an answer.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sbrs.artifact.read import MANIFEST, build_dir
from sbrs.errors import InputError, SbrsError, SbrsRuntimeError

if TYPE_CHECKING:
    import subprocess

logger = logging.getLogger(__name__)

#: Exception types the child's ``error`` names and the parent raises again (anything else: SbrsRuntimeError).
ERRORS: dict[str, type[SbrsError]] = {"InputError": InputError, "SbrsRuntimeError": SbrsRuntimeError}
#: How often a build's watcher looks at ``stop`` (``build_in_child``): how late a signal may end the child.
STOP_POLL_S = 0.1
#: How long an ended build may take to remove what it wrote before it is killed.
KILL_AFTER_S = 10.0


class BuildStopped(Exception):
    """``stop`` was set while the child built (``sbrs run`` got a signal): the child was ended and removed what
    it had written; the next run builds again."""


def ensure_build(app_path: str | Path, *, rebuild: bool = False, stop: threading.Event | None = None) -> Path:
    """The app's build folder, built first (in a child process, ``build_in_child``) when there is none yet or
    ``rebuild`` asks, which is logged (INFO). ``stop`` set while it builds: ``BuildStopped``."""
    folder = build_dir(app_path)
    if rebuild or not (folder / MANIFEST).exists():
        if not Path(app_path).is_file():  # said before "building" is logged and a child is started for nothing
            raise InputError("is a folder, not an app file" if Path(app_path).is_dir() else "no such file",
                             file=str(Path(app_path).resolve()))
        logger.info("sbrs run: %s %s", "rebuilding" if rebuild else "no build of the app yet; building", folder)
        build_in_child(app_path, stop=stop)
    return folder


def build_in_child(app_path: str | Path, *, stop: threading.Event | None = None) -> dict[str, Any]:
    """Build ``app_path`` in a fresh interpreter (module docstring); its ``BuildResult.to_dict``. The child's
    log records are logged here as they come; its error is raised here as the same type. ``stop`` set before
    the child answers (a signal to ``sbrs run``), or an exception here (Ctrl-C in a library caller), ends the
    child (SIGTERM: it removes what it wrote) instead of waiting for the whole build; the former raises
    ``BuildStopped``."""
    import subprocess  # only when building: a run of an existing build (``ensure_build``) starts no process

    level = logging.getLogger("sbrs").getEffectiveLevel()
    # -P: the working directory is not put first on the child's import path, so a folder named sbrs there is
    # never imported instead of this package (the app's path is absolute)
    safe_path = ["-P"] if sys.version_info >= (3, 11) else []
    command = [sys.executable, *safe_path, "-m", __name__, str(Path(app_path).resolve()), "--level", str(level),
               "--parent", str(os.getpid())]
    answer: dict[str, Any] | None = None
    last_words: deque[str] = deque(maxlen=20)
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, encoding="utf-8",
                          errors="replace") as child:
        assert child.stdout is not None and child.stderr is not None
        # stderr is drained beside stdout, or a chatty child would fill its pipe and wait for us forever
        drain = threading.Thread(target=last_words.extend, args=(child.stderr,), name="sbrs-build-stderr",
                                 daemon=True)
        drain.start()
        watch = None
        if stop is not None:  # the reading below blocks until the child writes: another thread watches stop
            watch = threading.Thread(target=_end_when_stopped, args=(child, stop), name="sbrs-build-stop",
                                     daemon=True)
            watch.start()
        try:
            for line in child.stdout:
                try:
                    message = json.loads(line)
                except json.JSONDecodeError:
                    continue  # not ours (a library printing on stdout)
                if not isinstance(message, dict):
                    continue
                if "log" in message:
                    record = message["log"]
                    logging.getLogger(str(record.get("name", "sbrs"))).log(int(record.get("level", logging.INFO)),
                                                                          "%s", record.get("message", ""))
                elif "result" in message or "error" in message:
                    answer = message
        except BaseException:
            _end(child)  # Popen's exit waits for it: it must not build on for minutes
            raise
        finally:
            child.wait()
            drain.join()
            if watch is not None:
                watch.join()
    if answer is not None and "result" in answer:
        return dict(answer["result"])
    if stop is not None and stop.is_set():  # its error, if any, is that it was ended
        raise BuildStopped(f"stopped by a signal while building {build_dir(app_path)} (a build cut short is "
                           "removed: the next run builds again)")
    if answer is not None:
        raise _error(answer["error"], app_path)
    lines = [line.strip() for line in last_words if line.strip()] or [f"exit status {child.returncode}"]
    raise SbrsRuntimeError(f"building {app_path} failed: {lines[-1]}")


def _end_when_stopped(child: subprocess.Popen[str], stop: threading.Event) -> None:
    """Until ``child`` exits: once ``stop`` is set, end it (``_end``)."""
    while child.poll() is None:
        if stop.wait(STOP_POLL_S):
            _end(child)
            return


def _end(child: subprocess.Popen[str]) -> None:
    """SIGTERM, which the child turns into a clean stop; SIGKILL where it is still there ``KILL_AFTER_S`` later."""
    import subprocess

    child.terminate()
    try:
        child.wait(KILL_AFTER_S)
    except subprocess.TimeoutExpired:  # its temporary folder may stay: hidden, and never read as a build
        child.kill()


def _error(error: Mapping[str, Any], app_path: str | Path) -> SbrsError:
    kind = ERRORS.get(str(error.get("kind")))
    if kind is InputError:
        return InputError(str(error.get("detail") or error.get("message")), file=error.get("file"),
                          line=error.get("line"), field=error.get("field"))
    if kind is not None:
        return kind(str(error.get("message")))
    return SbrsRuntimeError(f"building {app_path} failed: {error.get('message')}")


#: Signals that end a build cleanly in the child (``_unwind_once``): SIGTERM from ``build_in_child``, and those a
#: terminal sends the whole process group (Ctrl-C, a hangup).
STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _unwind_once(signum: int, frame: Any) -> None:
    """The first stop signal unwinds the build as Ctrl-C does: ``compile_app`` and the cache remove what they
    had half written on the way out. Later ones (Ctrl-C reaches the child, then the parent's SIGTERM) are
    ignored, or they would cut that removal short and leave a temporary build folder behind."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    raise KeyboardInterrupt


class _JsonLines(logging.Handler):
    """Every record as a ``{"log": ...}`` line on stdout (the parent logs it again)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            _answer({"log": {"name": record.name, "level": record.levelno, "message": record.getMessage()}})
        except Exception:  # a record that cannot be written must not end the build
            self.handleError(record)


def _answer(message: Mapping[str, Any]) -> None:
    sys.stdout.write(json.dumps(message, default=str) + "\n")
    sys.stdout.flush()


#: Linux's ``prctl`` option: the signal a process gets when its parent dies.
PR_SET_PDEATHSIG = 1


def _end_with_parent(parent: int) -> None:
    """Ask Linux for SIGTERM (a clean stop, ``_unwind_once``) when ``parent`` dies: a parent killed with SIGKILL,
    which can end nothing itself, left the build running to its end for nobody. Where ``prctl`` is not there
    (not Linux), nothing changes; where the parent died before the request, the stop comes at once."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sbrs.artifact.child APP.yaml [--level N]``: build, answer in JSON lines (module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m sbrs.artifact.child", description=__doc__.splitlines()[0])
    parser.add_argument("app", metavar="APP.yaml")
    parser.add_argument("--level", type=int, default=logging.INFO, help="the lowest level of records sent back")
    parser.add_argument("--parent", type=int, default=None, help="the process waiting for the answer")
    args = parser.parse_args(argv)
    root = logging.getLogger("sbrs")  # this process is ours: its sbrs loggers answer the parent
    root.addHandler(_JsonLines())
    root.setLevel(args.level)
    root.propagate = False
    for sig in STOP_SIGNALS:  # the parent ending the build (SIGTERM), Ctrl-C, or the terminal hanging up
        signal.signal(sig, _unwind_once)
    try:
        if args.parent is not None:
            _end_with_parent(args.parent)
        from sbrs.artifact.build import build_app

        result = build_app(args.app)
        violation = result.violation_error()
        if violation is not None:
            raise violation
        _answer({"result": result.to_dict()})
        return 0
    except SbrsError as error:
        _answer({"error": {"kind": type(error).__name__, "message": str(error),
                           "detail": getattr(error, "detail", str(error)), "file": getattr(error, "file", None),
                           "line": getattr(error, "line", None), "field": getattr(error, "field", None)}})
        return error.exit_code
    except KeyboardInterrupt:  # ended by the parent or Ctrl-C: what was written is gone, the parent knows why
        return 130
    except Exception as error:
        _answer({"error": {"kind": "internal", "message": f"{type(error).__name__}: {' '.join(str(error).split())}"}})
        return 1


if __name__ == "__main__":
    sys.exit(main())
