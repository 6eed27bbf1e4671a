"""Fake ONNX Runtime sessions that record which sessions are alive when each one runs: for the build's timing
measurements (``sbrs.compile.unit_streams``, ``sbrs.compile.session_choice``), which must let a unit's sessions go
once no later scenario runs it."""

from __future__ import annotations

import time

import pytest


class TrackedSessions:
    """``create_session`` replaced by sessions that note, each time one runs, the paths of every session alive
    (``seen``: path → those paths); ``alive``: id → path of the sessions not yet collected."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from sbrs import ort_env
        from sbrs.compile import unit_threads

        self.alive: dict[int, str] = {}
        self.seen: dict[str, set[str]] = {}
        sessions = self

        class Session:
            def __init__(self, path: str) -> None:
                self.path = path
                sessions.alive[id(self)] = path

            def __del__(self) -> None:
                sessions.alive.pop(id(self), None)

            def get_inputs(self) -> list[object]:
                return []

            def run(self, outputs: object, feed: object) -> None:
                sessions.seen.setdefault(self.path, set()).update(sessions.alive.values())
                time.sleep(0.0002)

        monkeypatch.setattr(ort_env, "create_session", lambda path, *args, **kwargs: Session(path))
        monkeypatch.setattr(unit_threads, "random_feed", lambda session, rng: {})


class RecordingSession:
    """A fake session that appends its ``name`` to ``events`` each time it runs, taking ``seconds`` a call: for
    the order of untimed and timed frames in a measurement."""

    def __init__(self, name: str, events: list[str], seconds: float = 0.0) -> None:
        self.name = name
        self.events = events
        self.seconds = seconds

    def run(self, outputs: object, feed: object) -> None:
        self.events.append(self.name)
        if self.seconds:
            time.sleep(self.seconds)
