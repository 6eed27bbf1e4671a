"""Transition tables (``sbrs.compile.transitions``): what a table promises about overlap."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sbrs.compile.transitions import PairTable


def _simulated_overlap(wait: tuple[int, ...], old_steps: int, ssr_step: int) -> int:
    """New steps that run before the old frame's last step, run as the ``priority`` schedule runs them."""
    done, overlapped = ssr_step, 0
    for need in wait:  # new steps in order; old steps run only while the next new step must wait
        while need > done:
            done += 1
        overlapped += done < old_steps
    return overlapped


@given(st.integers(1, 8).flatmap(lambda old: st.tuples(
    st.just(old), st.lists(st.integers(0, old), min_size=1, max_size=8), st.integers(1, old))))
def test_overlap_steps_counts_what_the_schedule_overlaps(case: tuple[int, list[int], int]) -> None:
    old_steps, wait, ssr_step = case
    table = PairTable("a", "b", old_steps, tuple(wait), tuple(wait), tuple(wait))
    assert table.overlap_steps(ssr_step) == _simulated_overlap(tuple(wait), old_steps, ssr_step)


def test_a_new_step_that_waits_for_the_whole_old_frame_holds_back_the_rest() -> None:
    table = PairTable("a", "b", 4, (0, 4, 0), (0, 4, 0), (0, 4, 0))
    assert table.overlap_steps(1) == 1  # step 3 waits for nothing itself, but runs after step 2
