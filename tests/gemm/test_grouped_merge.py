"""Merged groups on the GEMM path (cupyconv._gemm.grouped), on the CPU: the block-diagonal weight
views against an explicit NumPy construction, the merged problem against the grouped one through
the float64 reference (forward, backward-data, backward-weight), the merge-factor candidates and
choice, and the forward choice between the algorithms on a modelled H100."""

import itertools

import numpy as np
import pytest

from cupyconv import reference
from cupyconv._core import precision
from cupyconv._core.dtypes import numpy_dtype
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import STRIDED_COPY
from cupyconv._dispatch import forward as dispatch
from cupyconv._gemm import backward, forward, implicit_cost, kernel_args, launch, plans, staging
from cupyconv._gemm.grouped import (MAX_MERGED_CHANNELS, MERGE_MARGIN, best_factor,
                                    block_diagonal_args, forced_factor, forced_merge,
                                    group_blocks, merge_factors, merge_margin,
                                    merged_geometry)

from gpu_cases import rng_for
from host_kernels import compiler, host_module


def _geom(n=2, c=16, k=24, sp=(6, 7), ker=(3, 3), layout="NCHW", dtype="float32", **opts):
    g = opts.get("groups", 1)
    xs = (n, *sp, c) if layout == "NHWC" else (n, c, *sp)
    ws = (k, *ker, c // g) if layout == "NHWC" else (k, c // g, *ker)
    return ConvGeometry.from_shapes(xs, ws, layout=layout, dtype=dtype, **opts)


def _block_diagonal(w, groups, factor, channels_last):
    """The merged weight built element by element: merged group i, output row (j, r) of its
    factor * Kg, input channel (j2, c) of its factor * Cg: w[(i * factor + j) * Kg + r, c] when
    j == j2, else 0."""
    wc = np.moveaxis(w, -1, 1) if channels_last else w  # (K, Cg, *kernel)
    k, cg = wc.shape[:2]
    kg = k // groups
    out = np.zeros((k, factor * cg) + wc.shape[2:], w.dtype)
    for kk in range(k):
        j = (kk // kg) % factor
        out[kk, j * cg:(j + 1) * cg] = wc[kk]
    return np.moveaxis(out, 1, -1) if channels_last else out


def _expand(w, groups, factor, channels_last, geom):
    wm = np.zeros(merged_geometry(geom, factor).weight_shape, w.dtype)
    group_blocks(wm, groups, factor, channels_last, True)[...] = group_blocks(
        w, groups, factor, channels_last, False)
    return wm


def _extract(wm, groups, factor, channels_last):
    d = group_blocks(wm, groups, factor, channels_last, True)
    return d.reshape((-1,) + d.shape[3:])


VIEW_CASES = [  # (groups, factor, Cg, Kg, kernel)
    (2, 2, 1, 1, (3,)), (4, 2, 3, 5, (3, 3)), (8, 4, 4, 4, (3, 3)), (32, 8, 8, 8, (3, 3)),
    (32, 32, 4, 4, (1, 1)), (6, 3, 5, 2, (2, 1, 3)), (4, 4, 7, 1, (2, 2)), (8, 2, 1, 9, (5,)),
]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("groups,factor,cg,kg,ker", VIEW_CASES)
def test_group_blocks_build_and_read_the_block_diagonal(layout, groups, factor, cg, kg, ker):
    cl = layout == "NHWC"
    geom = _geom(c=groups * cg, k=groups * kg, sp=(9,) * len(ker), ker=ker, layout=layout,
                 groups=groups)
    w = rng_for("blocks", layout, groups, factor).uniform(-1, 1, geom.weight_shape)
    wm = _expand(w, groups, factor, cl, geom)
    np.testing.assert_array_equal(wm, _block_diagonal(w, groups, factor, cl))
    np.testing.assert_array_equal(_extract(wm, groups, factor, cl), w)
    # per-group weights given as a view with a negative stride along the output channels
    wr = np.ascontiguousarray(w[::-1])[::-1]
    np.testing.assert_array_equal(_expand(wr, groups, factor, cl, geom), wm)


@pytest.mark.skipif(compiler() is None, reason="no host C++20 compiler")
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("groups,factor,cg,kg,ker", VIEW_CASES)
def test_block_diagonal_kernel_builds_the_merged_weight(layout, dtype, groups, factor, cg, kg,
                                                         ker):
    """``block_diagonal`` (common/copy.cu) executed on the CPU with the arguments expand_weight
    launches it with: every element of a NaN-poisoned merged weight written, equal to the
    explicit construction (a small grid, so the grid-stride loop goes round)."""
    cl = layout == "NHWC"
    geom = _geom(c=groups * cg, k=groups * kg, sp=(9,) * len(ker), ker=ker, layout=layout,
                 groups=groups, dtype=dtype)
    w = rng_for("diag", layout, groups, factor).uniform(-1, 1, geom.weight_shape).astype(
        numpy_dtype(dtype))
    wm = np.full(merged_geometry(geom, factor).weight_shape, np.nan, w.dtype)
    total, *dims = block_diagonal_args(geom, factor)
    assert total == wm.size
    host_module(STRIDED_COPY).call(STRIDED_COPY.name_expression("block_diagonal", dtype), (3,),
                                   (64,), [w, wm, np.int64(total), *map(np.int32, dims)])
    np.testing.assert_array_equal(wm, _block_diagonal(w, groups, factor, cl))


CONV_CASES = [  # (groups, factor, Cg, Kg, spatial, kernel, options)
    (4, 2, 3, 5, (7, 8), (3, 3), dict(padding=1)),
    (8, 4, 2, 1, (9, 6), (3, 2), dict(stride=2, padding=[(1, 0), (2, 1)], dilation=(1, 2))),
    (6, 3, 1, 3, (11,), (3,), dict(stride=3, padding="same")),
    (4, 4, 2, 2, (4, 5, 4), (2, 3, 1), dict(padding=1)),
    (32, 8, 1, 2, (5, 5), (3, 3), dict(stride=2, padding=1)),
]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("groups,factor,cg,kg,sp,ker,opts", CONV_CASES)
def test_merged_problem_is_the_grouped_problem(layout, groups, factor, cg, kg, sp, ker, opts):
    """The float64 reference on the merged geometry and block-diagonal weights gives the grouped
    forward and backward-data, and its weight gradient's diagonal blocks the grouped one."""
    cl = layout == "NHWC"
    geom = _geom(c=groups * cg, k=groups * kg, sp=sp, ker=ker, layout=layout, groups=groups, **opts)
    rng = rng_for("merged", layout, groups, factor, sp)
    x = rng.uniform(-1, 1, geom.input_shape)
    w = rng.uniform(-1, 1, geom.weight_shape)
    dy = rng.uniform(-1, 1, geom.output_shape)
    wm = _expand(w, groups, factor, cl, geom)
    gm = groups // factor
    kw = dict(layout=layout, **opts)
    np.testing.assert_allclose(reference.conv(x, wm, groups=gm, **kw),
                               reference.conv(x, w, groups=groups, **kw), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        reference.conv_backward_data(dy, wm, x.shape, groups=gm, **kw),
        reference.conv_backward_data(dy, w, x.shape, groups=groups, **kw), rtol=1e-12, atol=1e-12)
    dwm = reference.conv_backward_weight(x, dy, wm.shape, groups=gm, **kw)
    np.testing.assert_allclose(_extract(dwm, groups, factor, cl),
                               reference.conv_backward_weight(x, dy, w.shape, groups=groups, **kw),
                               rtol=1e-12, atol=1e-12)


def test_merge_factors_are_divisors_within_the_cap():
    assert merge_factors(_geom(c=128, k=128, groups=32)) == (2, 4, 8, 16, 32)   # Cg = Kg = 4
    assert merge_factors(_geom(c=1024, k=1024, groups=32)) == (2, 4, 8)         # 32 -> 256
    assert merge_factors(_geom(c=96, k=48, groups=6)) == (2, 3, 6)
    assert merge_factors(_geom(c=40, k=800, groups=8)) == (2,)                  # Kg 100: 200
    for f in merge_factors(_geom(c=24, k=36, groups=12)):
        assert 12 % f == 0 and f * 3 <= MAX_MERGED_CHANNELS
    # not grouped, depthwise (own kernels), or nothing to merge under the cap
    assert merge_factors(_geom(c=16, k=16)) == ()
    assert merge_factors(_geom(c=16, k=32, groups=16)) == ()
    assert merge_factors(_geom(c=512, k=512, groups=2)) == ()


def test_best_factor_takes_the_least_estimate_and_one_on_ties():
    g = _geom(c=32, k=32, groups=8)  # Cg = Kg = 4: factors 2, 4, 8
    times = {8: 5.0, 4: 2.0, 2: 3.0, 1: 4.0}
    assert best_factor(g, lambda m: times[8 // m.groups], 0.0) == (4, 2.0)
    assert best_factor(g, lambda m: times[8 // m.groups], 2.5) == (1, 4.0)  # expansion not worth it
    assert best_factor(g, lambda m: 1.0, 0.0) == (1, 1.0)
    # a larger factor must beat the best smaller one by the margin, not by a hair
    close = {8: 1.9, 4: 2.0, 2: 3.0, 1: 4.0}
    assert best_factor(g, lambda m: close[8 // m.groups], 0.0) == (8, 1.9)
    assert best_factor(g, lambda m: close[8 // m.groups], 0.0, MERGE_MARGIN) == (4, 2.0)
    clear = {8: 2.0 * MERGE_MARGIN * 0.99, 4: 2.0, 2: 3.0, 1: 4.0}
    assert best_factor(g, lambda m: clear[8 // m.groups], 0.0, MERGE_MARGIN)[0] == 8
    dense = _geom(c=32, k=32)
    assert best_factor(dense, lambda m: 7.0, 0.0) == (1, 7.0)


def test_forced_merge_is_checked_and_scoped():
    g = _geom(c=32, k=32, groups=8)
    assert forced_factor(g) is None
    with forced_merge(4):
        assert forced_factor(g) == 4 and launch.plan_hooks_active()
        with pytest.raises(ValueError, match="forced merge factor 4"):
            forced_factor(_geom(c=24, k=24, groups=6))
        with pytest.raises(ValueError, match="forced merge factor 4"):
            forced_factor(_geom(c=32, k=32, groups=32))  # depthwise
    with forced_merge(1):
        assert forced_factor(_geom(c=16, k=16)) == 1
    assert forced_factor(g) is None and not launch.plan_hooks_active()


@pytest.fixture
def modelled_h100(monkeypatch):
    """Plans for a 132-multiprocessor device with Hopper's tensor cores, without a GPU; every
    plan cache filled under it is dropped after."""
    monkeypatch.setattr(plans, "sm_count", lambda device_id: 132)
    monkeypatch.setattr(implicit_cost, "sm_count", lambda device_id: 132)
    monkeypatch.setattr(dispatch, "sm_count", lambda device_id: 132)
    monkeypatch.setattr(precision, "_matrix_dtypes",
                        lambda device_id: frozenset({"float16", "bfloat16", "tf32", "wgmma"}))
    caches = (plans.plan_gemm, forward._forward_merge, backward._data_merge,
              backward._weight_merge, dispatch.heuristic_choice)
    for c in caches:
        c.cache_clear()
    yield
    for c in caches:
        c.cache_clear()


RESNEXT = [(128, 56, 1), (256, 28, 1), (512, 14, 1), (1024, 7, 1), (256, 56, 2), (512, 28, 2)]


def _resnext(width, size, stride, layout, dtype, prec="exact"):
    from dataclasses import replace

    g = _geom(n=32, c=width, k=width, sp=(size, size), layout=layout, dtype=dtype, groups=32,
              stride=stride, padding=1)
    return replace(g, precision=prec)


def test_merge_margin_applies_on_the_tensor_core_loops_only(modelled_h100):
    assert merge_margin(_resnext(256, 28, 1, "NHWC", "float16"), 0) == MERGE_MARGIN
    assert merge_margin(_resnext(256, 28, 1, "NCHW", "float32", "tf32"), 0) == MERGE_MARGIN
    assert merge_margin(_resnext(256, 28, 1, "NCHW", "float32"), 0) == 1.0


@pytest.mark.parametrize("width,size,stride", RESNEXT)
def test_resnext_layers_choose_the_merged_gemm_on_tensor_cores(modelled_h100, width, size, stride):
    """fp16/bf16 channels-last: the implicit GEMM, on merged groups whose channels fill 16-byte
    chunks and whole k-slices where a group alone does not; float32 channels-first: the grouped
    direct kernel (a merge would multiply the exact loop's work)."""
    for dtype in ("float16", "bfloat16"):
        g = _resnext(width, size, stride, "NHWC", dtype)
        assert dispatch.heuristic_choice(g, "auto", 0).name == "implicit_gemm"
        f, seconds = forward.forward_merge(g, 0)
        cg = width // 32
        assert 32 % f == 0 and (f * cg * 2) % 16 == 0
        with forced_merge(1):  # the estimates without a merge
            unmerged = [choice(g, 0)[1] for choice in (forward.forward_merge, backward.data_merge,
                                                       backward.weight_merge)]
        assert seconds <= unmerged[0]
        assert backward.data_merge(g, 0)[1] <= unmerged[1]
        assert backward.weight_merge(g, 0)[1] <= unmerged[2]
    g = _resnext(width, size, stride, "NCHW", "float32")
    assert dispatch.heuristic_choice(g, "auto", 0).name == "grouped_direct"


def test_merge_leaves_ungrouped_and_depthwise_problems_alone(modelled_h100):
    for g in (_geom(n=32, c=64, k=64, sp=(56, 56), padding=1, layout="NHWC", dtype="float16"),
              _geom(n=32, c=144, k=144, sp=(56, 56), padding=1, groups=144, dtype="float16")):
        assert forward.forward_merge(g, 0) == (1, forward.implicit_seconds(g, 0))
        assert backward.data_merge(g, 0)[0] == backward.weight_merge(g, 0)[0] == 1


def test_planned_gemm_reports_the_merged_launch(modelled_h100):
    g = _resnext(256, 28, 1, "NHWC", "float16")
    f = forward.forward_merge(g, 0)[0]
    assert f > 1
    kernel, shape, _ = dispatch.planned_gemm(g, dispatch.FORWARD["implicit_gemm"], 0)
    assert kernel == "conv_fprop" and shape == tuple(merged_geometry(g, f).gemm_forward)
    assert shape[3] == 32 // f and shape[1] == 8 * f


def test_every_merge_factor_of_the_grid_divides_its_groups():
    for groups, cg, kg in itertools.product((2, 4, 8, 32), (1, 3, 8, 32), (1, 5, 16)):
        g = _geom(c=groups * cg, k=groups * kg, groups=groups)
        for f in merge_factors(g):
            m = merged_geometry(g, f)
            assert m.groups * f == groups and m.weight_shape[1] == f * cg


@pytest.mark.parametrize("dtype,prec,ker,stride,c,want", [
    ("float16", "exact", (3, 3), 1, 64, True),    # tensor cores, whole chunks
    ("float32", "tf32", (1, 1), 2, 256, True),    # TF32 stride-2 1x1: the copy still paid
    ("float32", "exact", (3, 3), 1, 64, True),    # SIMT 3x3
    ("float32", "exact", (1, 1), 2, 256, False),  # SIMT stride-2 1x1: x is read a quarter
    ("float32", "tf32", (7, 7), 2, 3, False),     # 3 channels: no whole 16-byte chunks
])
def test_channels_first_backward_weight_stages_x_where_measured(modelled_h100, dtype, prec, ker,
                                                               stride, c, want):
    from dataclasses import replace

    geom = replace(_geom(n=4, c=c, k=64, sp=(28, 28), ker=ker, dtype=dtype, stride=stride),
                   precision=prec)
    assert backward.stage_nchw_x(geom, 0) is want


@pytest.mark.parametrize("layout,dtype,prec,ker,c,want", [
    ("NCHW", "float16", "exact", (3, 3, 1), 64, 64),   # channels-first 3x3: copied
    ("NCHW", "float32", "tf32", (1, 1, 1), 64, 0),     # channels-first 1x1: read as it is
    ("NCHW", "float32", "exact", (3, 3, 1), 64, 0),    # SIMT: never
    ("NHWC", "float16", "exact", (3, 3, 1), 64, 0),    # channels-last whole chunks: as it is
    ("NHWC", "float32", "tf32", (7, 7, 1), 3, 4),      # channels-last 3 channels: padded to 4
    ("NCHW", "bfloat16", "exact", (7, 7, 1), 3, 8),    # channels-first 3 channels: padded to 8
])
def test_implicit_conv_stages_x_where_measured(modelled_h100, layout, dtype, prec, ker, c, want):
    prob = kernel_args.ImplicitConv(dtype, layout == "NHWC", 4, c, 64, 1, (28, 28, 1),
                                    (28, 28, 1), ker, (1, 1, 1), (1, 1, 1), (1, 1, 0), prec)
    assert staging.staged_channels(prob, None, 0) == want


@pytest.mark.parametrize("dtype,ker,c,groups,want", [
    ("float16", (1, 7, 7), 3, 1, 24),     # ResNet conv1: K 7 x 24 instead of 49 x 8
    ("bfloat16", (1, 3, 3), 3, 1, 16),    # 3x3 on an image: 3 x 16 against 9 x 8 (1.5x)
    ("float32", (1, 7, 7), 3, 1, 0),      # TF32: 7 x 24 against 49 x 4 gains too little
    ("float16", (1, 1, 80), 1, 1, 80),    # 1-d, one channel: 80 against 80 x 8
    ("float16", (1, 7, 1), 3, 1, 0),      # one tap along W: nothing to unfold
    ("float16", (1, 3, 3), 6, 2, 0),      # groups: the unfolded channels would mix them
])
def test_implicit_conv_unfolds_width_where_k_shrinks(modelled_h100, dtype, ker, c, groups, want):
    prob = kernel_args.ImplicitConv(dtype, True, 4, c, 64, groups, (1, 28, 28), (1, 28, 28), ker,
                                    (1, 1, 1), (1, 1, 1), (0, 1, 1), "tf32" if dtype == "float32"
                                    else "exact")
    assert staging.unfolded_channels(prob, staging.staged_channels(prob, None, 0)) == want
