"""CPU check of the stride-phase decomposition behind backward-data: evaluating dx phase by phase
with the plan's rows, taps, pads and dilations reproduces the float64 reference exactly; each
phase's rows are placed in dx by the kernels' row map."""

import itertools
import math

import numpy as np
import pytest

from cupyconv import reference
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import SPLITK_REDUCE
from cupyconv._core.launch import element_strides
from cupyconv._gemm.backward import _window_strides, phase_dims, phase_plan, uncovered_rows
from cupyconv._gemm.kernel_args import fprop_out_map

from host_kernels import compiler, host_module


def _dx_by_phases(dy, w, size, stride, dilation, pad_lo):
    out = dy.shape[0]
    dx = np.zeros(size)  # rows of no phase receive no gradient
    for ph in phase_dims(size, out, w.shape[0], stride, dilation, pad_lo):
        for q in range(ph.rows):
            acc = 0.0
            for j, t in enumerate(ph.taps):        # taps in flipped order: a unit-stride conv
                p = q - ph.pad + j * ph.dilation
                if 0 <= p < out:
                    acc += dy[p] * w[t]
            dx[ph.first + q * stride] = acc
    return dx


def test_every_row_is_in_exactly_one_phase_and_the_sums_match_the_reference():
    rng = np.random.default_rng(0)
    checked = 0
    for size, k, s, d, lo, hi in itertools.product((5, 8, 9, 12), (1, 2, 3, 4, 5), (1, 2, 3, 4),
                                                  (1, 2, 3), (0, 1, 2, 4), (0, 3)):
        if (k - 1) * d + 1 > size + lo + hi:
            continue
        out = (size + lo + hi - (k - 1) * d - 1) // s + 1
        phases = phase_dims(size, out, k, s, d, lo)
        rows = sorted(ph.first + q * s for ph in phases for q in range(ph.rows))
        assert len(set(rows)) == len(rows) and set(rows) <= set(range(size))
        assert uncovered_rows(size, phases) == size - len(rows)
        assert all(ph.taps for ph in phases)
        w, dy = rng.standard_normal(k), rng.standard_normal(out)
        ref = reference.conv_backward_data(dy[None, None], w[None, None], (1, 1, size), stride=s,
                                           padding=[(lo, hi)], dilation=d)[0, 0]
        np.testing.assert_allclose(_dx_by_phases(dy, w, size, s, d, lo), ref, rtol=1e-12,
                                   atol=1e-12)
        checked += 1
    assert checked > 500


def test_stride_larger_than_kernel_leaves_rows_without_taps():
    phases = phase_dims(9, 3, 2, 4, 1, 0)     # kernel 2, stride 4: two of four phases get nothing
    assert len(phases) == 2
    assert uncovered_rows(9, phases) == 9 - sum(ph.rows for ph in phases) == 4


def test_huge_strides_list_only_the_phases_of_taps():
    """A stride of 2**31 (one dy pixel) must not enumerate 2**31 phases: the hang of issue 14."""
    phases = phase_dims(5, 1, 1, 2 ** 31, 1, 0)
    assert [(ph.first, ph.rows, ph.taps) for ph in phases] == [(0, 1, (0,))]
    assert uncovered_rows(5, phases) == 4
    phases = phase_dims(10 ** 9, 2, 3, 10 ** 9 - 1, 2, 1)
    assert len(phases) <= 3 and all(ph.rows <= 2 for ph in phases)


# ------------------------------------------------------------------ phases written in place
PLACEMENT_CASES = [  # (input spatial, kernel, stride, padding, channels-last, phases in place)
    ((9, 8), (3, 3), (2, 2), 1, True, True),
    ((9, 8), (3, 3), (2, 2), 1, False, True),
    ((11, 7), (3, 2), (3, 2), (2, 0), True, True),
    ((10,), (3,), (2,), 1, False, True),
    ((7,), (1,), (3,), 0, True, True),                   # stride > kernel: rows no tap reaches
    ((5, 6, 7), (3, 3, 3), (1, 2, 2), 1, True, True),    # 3-d, d unstrided, H a multiple of 2
    ((5, 5, 7), (3, 3, 3), (1, 2, 2), 1, False, False),  # ... H odd: runs unevenly spaced
    ((5, 6, 7), (3, 3, 3), (2, 1, 2), 1, False, False),  # 3-d, d strided: through a buffer
    ((6, 6, 5), (3, 3, 3), (2, 2, 1), 1, True, False),
]


@pytest.mark.parametrize("spatial,kernel,stride,padding,cl,in_place", PLACEMENT_CASES)
def test_phase_windows_strides_and_row_maps_place_every_row(spatial, kernel, stride, padding, cl,
                                                            in_place):
    """Each stride phase's window strides (``_window_strides``) are those of the dx view, and the
    row map built from them (``fprop_out_map``) sends GEMM row m to the view's element
    (image, pixel) in row-major pixel order, as out_map.cuh computes it (both layouts: the map
    is general, though only channels-last phases are written in place)."""
    geom = ConvGeometry.from_shapes((3, 4) + spatial if not cl else (3,) + spatial + (4,),
                                    (6, 4) + kernel if not cl else (6,) + kernel + (4,),
                                    stride=stride, padding=padding,
                                    layout="NHWC" if cl else "NCHW", dtype="float32")
    dx = np.empty(geom.input_shape, np.float32)
    for ph in phase_plan(geom).phases:
        view = dx[ph.window]
        assert _window_strides(geom) == element_strides(view, cl)
        out = fprop_out_map(ph.prob, element_strides(view, cl))
        assert (out is not None) == in_place
        assert ph.in_place == (in_place and cl)  # (channels-first phases keep their buffer)
        if out is None:
            continue
        rows = ph.prob.gemm[0]
        pixel_dims = view.shape[1:-1] if cl else view.shape[2:]
        expect = np.array([np.ravel_multi_index(
            (m // math.prod(pixel_dims),) + np.unravel_index(m % math.prod(pixel_dims), pixel_dims),
            (view.shape[0],) + tuple(pixel_dims)) for m in range(rows)])
        offsets = np.array([_row_offset(out, m) for m in range(rows)])
        # the view's element offsets of row m's channel 0, in its own row-major pixel order
        strides = np.array(element_strides(view, cl))
        pix = np.array([np.unravel_index(e, (view.shape[0],) + tuple(pixel_dims)) for e in expect])
        spatial_strides = strides[2:][3 - len(pixel_dims):]
        want = pix[:, 0] * strides[0] + pix[:, 1:] @ spatial_strides
        np.testing.assert_array_equal(offsets, want)


def _row_offset(out, m: int) -> int:
    """out_map.cuh's OutMap::row, in Python."""
    q, p = divmod(m, out.L)
    a, r = divmod(p, out.run)
    return q * out.outer + (a * out.row if out.run != out.L else 0) + r * out.inner


@pytest.mark.skipif(compiler() is None, reason="no host C++ compiler")
@pytest.mark.parametrize("spatial,kernel,stride,padding,cl,in_place",
                         [c for c in PLACEMENT_CASES if c[-1]])
def test_split_k_reduction_writes_each_phase_into_its_rows_of_dx(spatial, kernel, stride,
                                                                  padding, cl, in_place):
    """splitk_reduce (gemm/splitk_reduce.cu, whose row map is the epilogue's: out_map.cuh) run on
    the CPU with the arguments a phase's split-K launch passes: each phase's sums land on its
    rows of a NaN-poisoned dx, in the layout's order, and every other element stays NaN until
    its own phase writes it."""
    groups, kg = 2, 3
    shape_x = (2, groups * 2) + spatial if not cl else (2,) + spatial + (groups * 2,)
    geom = ConvGeometry.from_shapes(shape_x, (groups * kg, 2) + kernel if not cl
                                    else (groups * kg,) + kernel + (2,), stride=stride,
                                    padding=padding, groups=groups,
                                    layout="NHWC" if cl else "NCHW", dtype="float32")
    # dx of the backward problem: geom's input; the phase problems compute its channels
    dx = np.full(geom.input_shape, np.nan, np.float32)
    rng = np.random.default_rng(len(spatial) * 7 + stride[0])
    want = np.full_like(dx, np.nan)
    splits = 3
    for ph in phase_plan(geom).phases:
        m, n, _, g = ph.prob.gemm
        ws = rng.standard_normal((splits, g, m, n) if cl else (splits, g, n, m)).astype(np.float32)
        total = ws.sum(axis=0, dtype=np.float32)
        view = dx[ph.window]
        out = fprop_out_map(ph.prob, element_strides(view, cl))
        host_module(SPLITK_REDUCE).call(
            SPLITK_REDUCE.name_expression("splitk_reduce", "float32"), (5,), (64,),
            [ws, view, view, view, np.int32(0), np.int32(0), np.int32(0), np.int32(splits),
             np.int32(g), np.int32(m), np.int32(n), np.int32(cl), np.int32(g), np.int64(0),
             np.int64(n * out.col), np.int64(n), *map(np.int64, out.kernel_args())])
        # expected: (group, row m, column) -> view[image, pixel..., channel g * Kg + column]
        per_group = total if cl else total.transpose(0, 2, 1)          # (g, m, n)
        pixels = view.shape[1:-1] if cl else view.shape[2:]
        rows = per_group.transpose(1, 0, 2).reshape((view.shape[0],) + tuple(pixels) + (g * n,))
        want[ph.window] = rows if cl else np.moveaxis(rows, -1, 1)
    np.testing.assert_array_equal(dx, want)
