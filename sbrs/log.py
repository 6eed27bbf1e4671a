"""Logging in sbrs: every module logs through ``logging.getLogger(__name__)``, under the ``sbrs`` logger.

sbrs is embedded in other people's applications, so the library only emits records: it never configures a
handler on the root logger, never calls ``logging.basicConfig``, never changes warnings filters or signal
handlers. Whoever owns the process decides what is shown: the ``sbrs`` command configures one handler on the
``sbrs`` logger (one line per record, the message as written; ``-v`` shows DEBUG, ``-q`` warnings and errors
only); an application may do the same or let the records propagate to its own handlers.

Long build steps report their progress with :class:`Progress`: INFO lines such as
``optimising for this machine: 40% (4/10 models)``. A step says nothing while it is short: its first line
comes once it has run for ``after_s`` seconds, then at most one line per ``every_s`` seconds or per ``step``
of the work, and its last line when it ends (only if it said anything before, unless ``always_end``). So a
build of a small app prints nothing but its result, and a long one shows it is alive.
"""

from __future__ import annotations

import logging
import time

__all__ = ["Progress"]


class Progress:
    """Throttled progress lines of one long step on ``logger`` (module docstring).

    Call it with ``(done, total)`` as the work advances (it is a ``(done, total)`` callback, as the reduction
    search takes one); ``unit`` names what is counted (``generations``, ``models``); ``what`` starts every line.
    The clock starts when the object is made, just before the step. ``always_end``: report the end even of a
    short step (the search, whose progress ``sbrs build`` has always shown).
    """

    def __init__(self, logger: logging.Logger, what: str, total: int | None = None, *, unit: str = "",
                 after_s: float = 2.0, every_s: float = 1.0, step: float = 0.1, always_end: bool = False,
                 level: int = logging.INFO) -> None:
        self.logger = logger
        self.what = what
        self.total = total
        self.unit = unit
        self.after_s = after_s
        self.every_s = every_s
        self.step = step
        self.always_end = always_end
        self.level = level
        self._start = time.monotonic()
        self._last_fraction: float | None = None
        self._last_time = 0.0
        self._ended = False

    def __call__(self, done: int, total: int | None = None) -> None:
        total = self.total if total is None else total
        if not total or done <= 0 or self._ended or not self.logger.isEnabledFor(self.level):
            return
        self.total = total
        fraction = min(1.0, done / total)
        now = time.monotonic()
        end = done >= total
        if self._last_fraction is None:  # nothing said yet: only a long step speaks
            due = now - self._start >= self.after_s or (end and self.always_end)
        else:
            due = end or fraction - self._last_fraction >= self.step or now - self._last_time >= self.every_s
        if not due:
            return
        self._last_fraction, self._last_time, self._ended = fraction, now, end
        unit = f" {self.unit}" if self.unit else ""
        self.logger.log(self.level, "%s: %d%% (%d/%d%s)", self.what, int(100 * fraction), done, total, unit)
