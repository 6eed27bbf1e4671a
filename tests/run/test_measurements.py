"""The frame loop's fps measurements: a median without numpy's (which imports numpy.ma into a serving process)."""

from __future__ import annotations

import statistics
import subprocess
import sys

from hypothesis import given
from hypothesis import strategies as st

from sbrs.run.loop import _median


@given(st.lists(st.floats(min_value=0.0, max_value=10.0, allow_nan=False), max_size=40))
def test_the_median_is_the_median(values: list[float]) -> None:
    assert _median(values) == (statistics.median(values) if values else 0.0)


def test_measuring_fps_imports_nothing_more() -> None:
    code = ("import sys\nfrom sbrs.run.loop import Measurements\n"
            "class Controller:\n    def update_measurements(self, scenario, values): self.values = values\n"
            "controller = Controller()\nmeasurements = Measurements(controller, {})\n"
            "measurements._latencies['a'] = [0.01, 0.02, 0.04]\nmeasurements.flush()\n"
            "assert controller.values == {'fps': 50.0}, controller.values\n"
            "print(sorted(m for m in ('numpy.ma', 'statistics', 'random') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert result.stdout.strip() == "[]"
