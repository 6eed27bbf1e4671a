"""Transition tables (``sbrs.compile.transitions``): what a table promises about overlap."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from sbrs.compile.transitions import (
    Hazard,
    PairTable,
    StepAccess,
    accesses_conflict,
    algorithm6,
    check_schedule,
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


def _hazards_step_by_step(accesses: dict[str, tuple[StepAccess, ...]], waits: dict[str, tuple[int, ...]],
                          limit: int) -> list[Hazard]:
    """The schedule's definition walked literally: every pair, SSR step, new step and old step past what the
    new step is ordered after, one ``accesses_conflict`` each (the checker before it tested each pair once)."""
    found: list[Hazard] = []
    for old, old_steps in accesses.items():
        for new, new_steps in accesses.items():
            if old == new:
                continue
            for ssr in range(1, len(old_steps) + 1):
                after = 0
                for i, step in enumerate(new_steps, 1):
                    after = max(after, waits[f"{old}->{new}"][i - 1], ssr)
                    for j in range(after + 1, len(old_steps) + 1):
                        if accesses_conflict(old_steps[j - 1], step):
                            found.append(Hazard(old, new, ssr, j, i, ""))
                            if len(found) >= limit:
                                return found
    return found


_ranges = st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 12), st.integers(1, 6)), max_size=3)
_steps = st.lists(st.tuples(_ranges, _ranges), min_size=1, max_size=5)


@given(scenarios=st.lists(_steps, min_size=2, max_size=3), data=st.data(), limit=st.integers(1, 30))
def test_check_schedule_finds_the_hazards_of_the_literal_definition(
        scenarios: list[list[tuple[list, list]]], data: st.DataObject, limit: int) -> None:
    """On random byte accesses and random tables, the checker reports exactly the hazards a step-by-step walk of
    every SSR step finds, in the same order."""
    accesses = {f"s{k}": tuple(StepAccess(f"u{k}.{i}", tuple((t, a, a + n) for t, a, n in reads),
                                          tuple((t, a, a + n) for t, a, n in writes))
                               for i, (reads, writes) in enumerate(steps))
                for k, steps in enumerate(scenarios)}
    waits = {f"{o}->{n}": tuple(data.draw(st.lists(st.integers(0, len(accesses[o])), min_size=len(accesses[n]),
                                                   max_size=len(accesses[n]))))
             for o in accesses for n in accesses if o != n}
    got = [(h.old, h.new, h.ssr_step, h.old_step, h.new_step) for h in check_schedule(accesses, waits, limit=limit)]
    want = [(h.old, h.new, h.ssr_step, h.old_step, h.new_step) for h in _hazards_step_by_step(accesses, waits, limit)]
    assert got == want


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
