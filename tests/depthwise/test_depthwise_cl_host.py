"""The channels-last depthwise kernels (depthwise_cl.cu) executed on the CPU through
``host_kernels``: their own source, launched with the plans and packed scalars the GPU path uses,
against the float64 reference.  Forward with bias, backward-data and backward-weight; the row
walk at W stride 1 and 2 and the any-shape variant; every vector width; views with offsets and
negative strides.  Skipped without a host C++20 compiler."""

import zlib
from types import SimpleNamespace

import numpy as np
import pytest

from cupyconv import reference
from cupyconv._core.dtypes import compute_dtype, numpy_dtype
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import depthwise_cl_module, depthwise_cl_wgrad_module
from cupyconv._core.launch import element_strides
from cupyconv._core.verify import random_array, rel_error, tolerance
from cupyconv._depthwise import channels_last as cl

from host_kernels import compiler, host_module
from host_route import host_empty

pytestmark = pytest.mark.skipif(compiler() is None, reason="no host C++ compiler")

def _view(a):
    """What vector_width reads of an array: shape, strides, itemsize, base address."""
    return SimpleNamespace(shape=a.shape, strides=a.strides, itemsize=a.itemsize,
                           data=SimpleNamespace(ptr=a.__array_interface__["data"][0]))


def _operands(*arrays):
    return tuple((_view(a), element_strides(a, True)) for a in arrays)


def _run_passes(g, x, w, b, dy, expect_vec=None, wgrad_sms=cl.WGRAD_PLAN_SMS):
    """Forward (with bias), backward-data and backward-weight on the host; checked against the
    reference for x, w, b, dy (any views); backward-weight planned for ``wgrad_sms``
    multiprocessors."""
    dtype = g.dtype
    opts = dict(stride=g.stride, dilation=g.dilation, groups=g.groups, layout="NHWC",
                padding=tuple(zip(g.pad_lo, g.pad_hi)))
    wc = np.ascontiguousarray(w)
    # forward
    y = host_empty(g.output_shape, dtype)
    vec = cl.vector_width(g, _operands(x, y))
    assert vec and (expect_vec is None or vec == expect_vec)
    plan = cl.pass_plan(g, False, vec)
    shape = cl.pass_shape(g, plan, False, True, element_strides(x, True))
    module = depthwise_cl_module(dtype, plan.kf)
    host_module(module).launch(module.name_expression("depthwise_cl", dtype, shape.variant),
                               shape, (x, wc, b, y))
    ref = reference.conv(x, w, b, **opts)
    assert rel_error(y, ref) <= tolerance(dtype, ref), "forward"
    # backward-data
    dx = host_empty(g.input_shape, dtype)
    vec = cl.vector_width(g, _operands(dy, dx))
    plan = cl.pass_plan(g, True, vec)
    shape = cl.pass_shape(g, plan, True, False, element_strides(dy, True))
    host_module(module).launch(module.name_expression("depthwise_cl", dtype, shape.variant),
                               shape, (dy, wc, dx, dx))
    ref = reference.conv_backward_data(dy, w, g.input_shape, **opts)
    assert rel_error(dx, ref) <= tolerance(dtype, ref), "backward-data"
    # backward-weight: partial sums per chunk, summed here in chunk order (the reduce kernel's)
    vec = cl.vector_width(g, _operands(x, dy), wgrad=True)
    wp = cl.wgrad_plan(g, vec, wgrad_sms)
    shape = cl.wgrad_shape(g, wp, element_strides(x, True), element_strides(dy, True))
    partial = np.full((wp.chunks, g.out_channels, int(np.prod(g.kernel))), np.nan,
                      compute_dtype(dtype))
    wmod = depthwise_cl_wgrad_module(dtype, wp.plan.kf)
    host_module(wmod).launch(wmod.name_expression("depthwise_cl_wgrad", dtype, shape.variant),
                             shape, (x, dy, partial))
    assert not np.isnan(partial).any(), "unwritten partial sums"
    dw = partial.sum(axis=0).astype(numpy_dtype(dtype)).reshape(g.weight_shape)
    ref = reference.conv_backward_weight(x, dy, g.weight_shape, **opts)
    assert rel_error(dw, ref) <= tolerance(dtype, ref), "backward-weight"


# (dtype, n, c, spatial, kernel, options, expected VEC)
CASES = [
    ("float32", 2, 8, (6, 11), 3, dict(padding=1), 4),
    ("float32", 1, 16, (6, 13), 5, dict(stride=2, padding=[(2, 1), (0, 3)]), 4),
    ("float32", 1, 8, (7, 9), 3, dict(stride=2, padding=1), 4),
    ("float32", 2, 5, (5, 9), 4, dict(padding="same"), 1),
    ("float32", 1, 8, (8, 10), 3, dict(stride=3, dilation=2, padding=2), 4),
    ("float32", 1, 4, (4, 5, 7), 3, dict(padding=1, stride=(1, 2, 2)), 4),
    ("float32", 2, 8, (13,), 3, dict(padding="same_lower", stride=2), 4),
    ("float16", 1, 16, (5, 10), 3, dict(padding=1), 8),
    ("float16", 1, 12, (7, 9), 3, dict(stride=2, padding="same"), 4),
    # 16-bit at 4 channels per thread: two destination rows per run (RY = 2)
    ("float16", 1, 12, (7, 9), 5, dict(padding=2), 4),
    ("bfloat16", 1, 12, (6, 7), 3, dict(padding=[(2, 0), (1, 1)]), 4),
    ("bfloat16", 1, 8, (5, 11), 3, dict(padding=[(0, 2), (1, 1)]), 8),
    ("float64", 1, 6, (6, 9), 3, dict(stride=2, padding=1), 2),
    # 7x7: backward-weight in 7 passes of kernel rows; 4x4 in 2 passes of taps
    ("float32", 1, 8, (9, 10), 7, dict(padding=3), 4),
    ("float32", 1, 8, (6, 9), 4, dict(padding=[(1, 2), (2, 1)]), 4),
    ("float16", 1, 8, (9, 12), 7, dict(stride=2, padding=3), 4),  # (16-bit > 3x3: at most 4)
    ("float64", 1, 4, (5, 8), 5, dict(padding=2), 2),
    # 130 channel vectors: 3 blocks across the channels, the last with 2 idle threads
    ("float32", 1, 520, (3, 5), 3, dict(padding=1), 4),
]


def _case_id(case):
    dtype, n, c, sp, k, o, _ = case
    return f"{dtype}-c{c}-{'x'.join(map(str, sp))}-k{k}-" + "-".join(f"{a}{v}" for a, v in o.items())


def _problem(case):
    dtype, n, c, sp, k, o, vec = case
    ks = (k,) * len(sp)
    g = ConvGeometry.from_shapes((n, *sp, c), (c, *ks, 1), groups=c, layout="NHWC", dtype=dtype, **o)
    rng = np.random.default_rng(zlib.crc32(_case_id(case).encode()))
    x, w, dy = (random_array(rng, s, dtype) for s in (g.input_shape, g.weight_shape, g.output_shape))
    b = random_array(rng, (c,), dtype)
    return g, x, w, b, dy, vec


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_host_kernels_match_reference(case):
    g, x, w, b, dy, vec = _problem(case)
    _run_passes(g, x, w, b, dy, vec)


@pytest.mark.parametrize("case", [CASES[0], CASES[1], CASES[7]], ids=_case_id)
def test_host_kernels_read_views(case):
    """Offset slices (narrower vectors) and negative H and W strides."""
    g, x, w, b, dy, _ = _problem(case)
    n, *sp, c = x.shape

    def offset(a, k):  # a copy of ``a`` inside a wider array, k channels in
        big = np.zeros(a.shape[:-1] + (a.shape[-1] + 8,), a.dtype)
        big[..., k:k + a.shape[-1]] = a
        return big[..., k:k + a.shape[-1]]

    def flipped(a):  # a copy of ``a`` read through negative H and W strides
        return np.ascontiguousarray(a[:, ::-1, ::-1])[:, ::-1, ::-1]

    for make in (lambda a: offset(a, 1), lambda a: offset(a, 8), flipped):
        _run_passes(g, make(x), w, b, make(dy))


# Backward-weight planned for one multiprocessor: few chunks, so each thread takes many runs,
# whose coordinates it advances by a block's rows of threads at a time, across rows, planes (3-d)
# and images; 4 and 64 thread rows (256 and 16 channels).
LONG_WALK_CASES = [
    ("float32", 3, 256, (5, 4, 9), 3, dict(padding=1, stride=(2, 1, 1)), 4),
    ("float16", 5, 256, (13, 17), 5, dict(stride=2, padding=2), 4),
    ("float32", 5, 256, (7, 6), 4, dict(padding="same"), 4),
    ("float32", 4, 16, (8, 4, 5), 3, dict(padding=1), 4),
    ("float32", 200, 16, (9,), 3, dict(padding=1, stride=2), 4),
]


@pytest.mark.parametrize("case", LONG_WALK_CASES, ids=_case_id)
def test_host_wgrad_with_long_thread_walks(case):
    g, x, w, b, dy, vec = _problem(case)
    wp = cl.wgrad_plan(g, min(vec, 4), 1)
    assert wp.runs_per_chunk >= 3 * wp.plan.by  # three or more runs per thread
    _run_passes(g, x, w, b, dy, vec, wgrad_sms=1)


@pytest.fixture
def small_grids(monkeypatch):
    """Plans for large grids on small problems: several runs per forward thread, one run per
    backward-weight thread (so several chunks); the memoized plans are dropped around it."""
    monkeypatch.setattr(cl, "MIN_BLOCKS", 1)
    monkeypatch.setattr(cl, "WGRAD_MIN_RUNS", 1)
    cl.wgrad_plan.cache_clear()
    yield
    cl.wgrad_plan.cache_clear()


# Problems with more runs than a block has rows of threads.
LARGE_GRID_CASES = [
    ("float32", 2, 16, (12, 30), 3, dict(padding=1), 4),
    ("float32", 2, 16, (10, 30), 4, dict(padding="same"), 4),
    ("float16", 2, 64, (12, 33), 5, dict(stride=2, padding=2), 4),
]


@pytest.mark.parametrize("case", LARGE_GRID_CASES, ids=_case_id)
def test_host_kernels_with_large_grid_plans(case, small_grids):
    """Rounds > 1 with a run count that leaves the last block part-empty; backward-weight over
    several chunks."""
    g, x, w, b, dy, vec = _problem(case)
    plan = cl.pass_plan(g, False, vec)
    assert cl._rounds(plan) == cl.MAX_ROUNDS
    assert cl.wgrad_plan(g, min(vec, 4)).chunks > 1
    _run_passes(g, x, w, b, dy, vec)


# Problems whose forward and backward-data passes take the two-row runs (RY = 2, 16-bit at 4
# channels per thread) and the one-row walk, for the non-finite test below.
NONFINITE_CASES = [
    ("float32", 2, 8, (12, 13), 3, dict(padding=1), 4),  # issue 45's case
    ("float16", 1, 12, (7, 9), 5, dict(padding=2), 4),
    ("bfloat16", 1, 12, (8, 7), 3, dict(padding=1), 4),
    ("float32", 1, 8, (9, 10), 3, dict(stride=2, padding=1), 4),
]


def _masks(a):
    a = np.asarray(a, np.float64)
    return np.isnan(a), a == np.inf, a == -np.inf


@pytest.mark.parametrize("case", NONFINITE_CASES, ids=_case_id)
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_host_nonfinite_reaches_only_its_window(case, value):
    """One NaN or inf in x (forward) or dy (backward-data), at a corner, an edge and an interior
    pixel, reaches exactly the outputs whose window holds it: the float64 reference's masks.
    (Two-row runs fed each source row to both rows with a zero tap for the row it is not one of:
    0 * NaN leaked the value one row further, issue 45.)"""
    g, x, w, b, dy, _ = _problem(case)
    opts = dict(stride=g.stride, dilation=g.dilation, groups=g.groups, layout="NHWC",
                padding=tuple(zip(g.pad_lo, g.pad_hi)))
    w = np.sign(w) * (0.25 + np.abs(w)).astype(w.dtype)  # (no zero taps: 0 * inf is NaN)
    wc = np.ascontiguousarray(w)
    dtype = g.dtype
    for src, shape in ((x, g.input_shape), (dy, g.output_shape)):
        for pos in ((0, 0), (0, shape[2] // 2), (shape[1] // 2, shape[2] // 2)):
            a = src.copy()
            a[(0,) + pos + (3,)] = value
            transposed = src is dy
            out = host_empty(g.input_shape if transposed else g.output_shape, dtype)
            vec = cl.vector_width(g, _operands(a, out))
            plan = cl.pass_plan(g, transposed, vec)
            shape_ = cl.pass_shape(g, plan, transposed, not transposed,
                                   element_strides(a, True))
            module = depthwise_cl_module(dtype, plan.kf)
            host_module(module).launch(module.name_expression("depthwise_cl", dtype,
                                                              shape_.variant),
                                       shape_, (a, wc, out if transposed else b, out))
            ref = (reference.conv_backward_data(a, w, g.input_shape, **opts) if transposed
                   else reference.conv(a, w, b, **opts))
            for got, want, what in zip(_masks(out), _masks(ref), ("NaN", "+inf", "-inf")):
                assert np.array_equal(got, want), (
                    f"{'backward-data' if transposed else 'forward'}: {what} at "
                    f"{int(got.sum())} outputs, reference {int(want.sum())} ({value} at {pos})")
