"""Transition tables (``sbrs.compile.transitions``): what a table promises about overlap."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sbrs.compile.transitions import (
    PairTable,
    StepAccess,
    accesses_conflict,
    algorithm6,
    hazard_waits,
    pair_table,
)


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


@st.composite
def _frames(draw: st.DrawFn) -> tuple[tuple[StepAccess, ...], tuple[StepAccess, ...]]:
    """Two frames of steps on a few units, each step reading and writing a few byte ranges of a small arena."""
    units = [f"u{k}" for k in range(draw(st.integers(1, 4)))]
    ranges = st.lists(st.tuples(st.integers(0, 12), st.integers(1, 4)).map(
        lambda r: ("t", r[0] * 64, (r[0] + r[1]) * 64)), max_size=3).map(tuple)

    def frame() -> tuple[StepAccess, ...]:
        return tuple(StepAccess(draw(st.sampled_from(units)), draw(ranges), draw(ranges))
                     for _ in range(draw(st.integers(0, 6))))
    return frame(), frame()


@given(_frames())
def test_pair_table_is_algorithm6_line_by_line(frames: tuple[tuple[StepAccess, ...], tuple[StepAccess, ...]]) -> None:
    """The linear-time tables the build stores are Algorithm 6 as written (lines 4-10), with byte hazards and
    with the thesis' same-unit rule, and the waits are the hazard analysis'."""
    old, new = frames
    table = pair_table("o", "n", old, new)
    assert table.x == algorithm6(old, new)
    assert table.thesis_x == algorithm6(old, new, bytes_hazards=False)
    assert table.wait == hazard_waits(old, new) == tuple(
        max((j for j, step in enumerate(old, 1) if accesses_conflict(step, target)), default=0) for target in new)
