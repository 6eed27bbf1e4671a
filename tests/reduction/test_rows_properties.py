"""Row dependencies against brute force, and band-by-band execution on ring buffers against whole execution."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from sbrs.reduction import RowMap, check_schedule, cnn_to_csdf, schedule_csdf
from sbrs.reduction.rows import layer_height
from tests.reduction.chains import chain_model, chains, conv_out, reference, replay, window_op


@st.composite
def windows(draw: st.DrawFn) -> tuple[RowMap, int]:
    """A random window layer (kernel, stride, dilation, pads incl. crops) and a band height."""
    k, s, d = draw(st.integers(1, 7)), draw(st.integers(1, 4)), draw(st.integers(1, 3))
    ext = (k - 1) * d + 1
    pt, pb = draw(st.integers(-3, ext - 1)), draw(st.integers(-3, ext - 1))
    h_in = draw(st.integers(max(1, ext - pt - pb, -pt - pb + 1), 48))
    h_out = conv_out(h_in, k, s, d, pt, pb)
    band = draw(st.integers(1, max(1, h_out)))
    return RowMap("window", h_in, h_out, kernel=k, stride=s, dilation=d, pad_top=pt), band


@settings(max_examples=300, deadline=None)
@given(windows())
def test_needed_rows_equal_brute_force_receptive_field(case: tuple[RowMap, int]) -> None:
    """For each output band, the rows the phases read = the receptive field computed from kernel, stride, pads and
    dilation by enumerating every tap (its hull, clipped to the input; exactly the touched rows without dilation)."""
    row_map, band = case
    for o0 in range(0, row_map.out_rows, band):
        o1 = min(o0 + band, row_map.out_rows)
        touched = {o * row_map.stride - row_map.pad_top + j * row_map.dilation
                   for o in range(o0, o1) for j in range(row_map.kernel)}
        real = sorted(r for r in touched if 0 <= r < row_map.in_rows)
        lo, hi = row_map.needed(o0, o1)
        # the hull of the receptive field (padding positions included), clipped to the input
        assert (lo, hi) == (min(max(min(touched), 0), row_map.in_rows),
                            max(min(max(touched) + 1, row_map.in_rows), min(max(min(touched), 0), row_map.in_rows)))
        if real:  # every real input row the band touches is read; without dilation, exactly those rows
            assert lo <= real[0] and real[-1] < hi
            if row_map.dilation == 1 and row_map.stride <= row_map.kernel:
                assert (lo, hi) == (real[0], real[-1] + 1)
        top, bottom = row_map.padding(o0, o1)
        assert top == max(0, -min(touched))
        assert bottom == max(0, max(touched) + 1 - row_map.in_rows)


@settings(max_examples=200, deadline=None)
@given(windows(), st.sampled_from(["conv", "pool"]))
def test_band_computation_equals_whole_layer(case: tuple[RowMap, int], kind: str) -> None:
    """Running a band on its needed rows with its band padding gives exactly the whole layer's rows."""
    row_map, band = case
    if kind == "pool" and row_map.dilation != 1:
        return
    rng = np.random.default_rng(row_map.in_rows * 31 + band)
    x = rng.standard_normal(row_map.in_rows)
    pt = row_map.pad_top
    ext = row_map.extent
    pb = (row_map.out_rows - 1) * row_map.stride + ext - row_map.in_rows - pt
    whole = window_op(kind, x, row_map.kernel, row_map.stride, row_map.dilation, pt, pb)
    assert len(whole) == row_map.out_rows
    for o0 in range(0, row_map.out_rows, band):
        o1 = min(o0 + band, row_map.out_rows)
        lo, hi = row_map.needed(o0, o1)
        top, bottom = row_map.padding(o0, o1)
        part = window_op(kind, x[lo:hi], row_map.kernel, row_map.stride, row_map.dilation, top, bottom)
        np.testing.assert_array_equal(part, whole[o0:o1])


@settings(max_examples=120, deadline=None)
@given(chains(), st.data())
def test_chain_schedule_on_ring_buffers_equals_whole_inference(case: tuple[int, list], data: st.DataObject) -> None:
    """Random conv/pool/residual chains with random bands: the schedule run on rings of the reported sizes
    reproduces whole-tensor inference, every channel balances, and no buffer exceeds its tensor."""
    height, steps = case
    model = chain_model(height, steps)
    bands = {layer.name: data.draw(st.integers(1, layer_height(layer)), label=layer.name)
             for layer in model.layers}
    graph = cnn_to_csdf(model, bands)
    assert all(c.consistent for c in graph.channels)
    schedule = schedule_csdf(graph)
    assert check_schedule(graph, schedule) == []
    for buffer in schedule.buffers:
        assert 0 < buffer.rows <= buffer.full_rows
    x = np.random.default_rng(height).standard_normal(height)
    np.testing.assert_allclose(replay(model, graph, schedule, x), reference(height, steps, x), rtol=0, atol=1e-9)


@settings(max_examples=60, deadline=None)
@given(chains())
def test_one_row_bands_never_need_more_than_the_window(case: tuple[int, list]) -> None:
    """With 1-row bands, a conv/pool input buffer holds at most its window (kernel extent, or the stride when
    larger) plus one row, plus the rows the last phase takes without using them (bottom crop, stride
    remainder: Algorithm 4, lines 32/36, consume every remaining row at the last phase). A whole-height
    configuration holds every tensor whole."""
    height, steps = case
    model = chain_model(height, steps)
    full = schedule_csdf(cnn_to_csdf(model, {}))
    assert all(b.rows == b.full_rows for b in full.buffers)
    graph = cnn_to_csdf(model, {layer.name: 1 for layer in model.layers})
    one = schedule_csdf(graph)
    for layer in model.layers:
        if layer.op in ("Conv", "MaxPool") and not layer.name.endswith("_conv"):
            ext = (layer.kernel[0] - 1) * layer.dilation[0] + 1
            item = graph.layer(layer.name).input(layer.inputs[0])
            trailing = one.buffer(layer.inputs[0]).full_rows - item.rows[-1][1]  # rows below the last window
            held = one.buffer(layer.inputs[0]).rows
            assert held <= max(ext, layer.stride[0]) + max(0, -layer.pads[0]) + trailing + 1
