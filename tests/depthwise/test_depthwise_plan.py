"""Launch plans of the depthwise and separable kernels, on the CPU: every tile covers its plane,
blocks fit the hardware limits, windows bound what the kernels stage, and method choice."""

import itertools
import math

import pytest

from cupyconv._dispatch.backward import backward_method
from cupyconv._depthwise.planes import contiguous_planes, plane_plan
from cupyconv._depthwise.tiles import MAX_Z, SMEM_LIMIT, THREADS, _window, tile_plan, wgrad_plan
from cupyconv._core.geometry import ConvGeometry
from cupyconv._depthwise.separable import fused_pays, fused_plan

SHAPES = [(1, 1), (7, 7), (14, 14), (28, 28), (56, 56), (112, 112), (9, 70), (1, 50), (300, 3)]


def _geom(sp, k=3, c=8, mult=1, layout="NCHW", dtype="float32", **opts):
    ks = k if isinstance(k, tuple) else (k,) * len(sp)
    if layout == "NHWC":
        xs, ws = (2, *sp, c), (c * mult, *ks, 1)
    else:
        xs, ws = (2, c, *sp), (c * mult, 1, *ks)
    return ConvGeometry.from_shapes(xs, ws, groups=c, layout=layout, dtype=dtype, **opts)


@pytest.mark.parametrize("sp", SHAPES)
@pytest.mark.parametrize("stride,dilation,k", [(1, 1, 3), (2, 1, 5), (1, 3, 7), (3, 2, 3)])
@pytest.mark.parametrize("transposed", [False, True])
def test_tile_plan_covers_the_plane_and_fits(sp, stride, dilation, k, transposed):
    pad = (k - 1) * dilation // 2
    g = _geom(sp, k, stride=stride, dilation=dilation, padding=pad)
    t = tile_plan(g, transposed)
    assert t is not None
    h, w = (g.spatial if transposed else g.out_spatial)
    assert t.tiles_h * t.by * t.vr >= h and t.tiles_w * t.tile_w >= w
    assert (t.tiles_h - 1) * t.by * t.vr < h and (t.tiles_w - 1) * t.tile_w < w  # no empty tile
    assert t.cw == (4 if (k, stride, dilation) == (3, 1, 1) else 1)
    assert t.bx * t.by * t.bz <= THREADS and 1 <= t.vr <= 8 and t.bz <= MAX_Z
    assert t.smem <= SMEM_LIMIT and t.smem == t.bz * t.rows_max * t.pitch * 4
    assert t.pitch % 4 == 0 and t.pitch >= _window(t.tile_w, k, stride, dilation, transposed) + 3


def _device_extent(o0, span, s, d, p, k):
    """The transposed tile's window as the kernel computes it (tile_origin / tile_extent)."""
    q = o0 + p - (k - 1) * d
    first = -(-q // s)
    return (o0 + span - 1 + p) // s - first + 1


def test_transposed_window_bound_holds_for_every_tile_origin():
    for o0, span, s, d, p, k in itertools.product(range(0, 12), (1, 5, 8), (1, 2, 3), (1, 2),
                                                  (0, 1, 3), (1, 3, 4)):
        assert _device_extent(o0, span, s, d, p, k) <= _window(span, k, s, d, True)


def test_large_windows_fall_back_to_the_gather_kernels():
    g = _geom((9, 11), 7, dilation=20, padding=60)
    assert tile_plan(g, False) is None and tile_plan(g, True) is None
    assert wgrad_plan(_geom((9, 20), 17, padding=8))[0] is None  # wider than one tap pass
    assert tile_plan(_geom((9, 11), layout="NHWC"), False) is None  # channels-last: gather


@pytest.mark.parametrize("sp,c", [((56, 56), 144), ((7, 7), 960), ((112, 112), 32), ((5, 6, 7), 4)])
def test_wgrad_plan_splits_planes_evenly(sp, c):
    g = _geom(sp, c=c, padding=1)
    t, chunks, per_chunk = wgrad_plan(g)
    planes = g.batch * (g.out_spatial[0] if g.ndim == 3 else 1)
    if t is None:
        pixels = g.batch * math.prod(g.out_spatial)
        assert chunks * per_chunk >= pixels > (chunks - 1) * per_chunk
        return
    assert chunks * per_chunk >= planes > (chunks - 1) * per_chunk
    assert t.bz <= per_chunk and t.smem <= SMEM_LIMIT


def test_fused_plan_fits_and_auto_fuses_only_few_pointwise_outputs():
    g = _geom((56, 56), c=144, padding=1)
    plan = fused_plan(g, 24)
    # whole 56-wide rows, 4 of them (224 pixels, 56 groups of 4), 4 groups of 6 outputs: all 24
    # pointwise outputs in one block, the 3x3 variant
    assert (plan.tw, plan.th, plan.tiles_w, plan.tiles_h) == (56, 4, 1, 14)
    assert (plan.kt, plan.kg, plan.kp_blocks, plan.kf) == (6, 4, 1, 3)
    assert plan.smem <= SMEM_LIMIT and plan.cc_chunk == 8
    big = fused_plan(g, 24, 95 * 1024)  # a device that opts in beyond 48 KB: 16 channels a chunk
    assert big.cc_chunk == 16 and SMEM_LIMIT < big.smem <= 95 * 1024
    assert fused_pays(g, 24) and not fused_pays(g, 1000)
    assert fused_plan(_geom((4, 5, 6), padding=1), 8) is None  # 3-d: unfused only
    wide = _geom((8, 4000), 7, dilation=4, padding=12, dtype="float64")
    plan = fused_plan(wide, 8)
    assert plan is None or plan.smem <= SMEM_LIMIT
    assert fused_plan(_geom((20, 17), 5, stride=2, padding=2), 5).kf == 0


@pytest.mark.parametrize("spatial,kernel,opts,kp", [
    ((56, 56), 3, dict(padding=1), 24), ((7, 7), 3, dict(padding=1), 8),
    ((30, 29), 3, dict(padding=1), 40), ((9, 150), 3, dict(padding=(0, 2)), 70),
    ((40,), 5, dict(padding=2, stride=3), 6), ((5000,), 3, dict(), 1),
    ((112, 112), 3, dict(padding=1, stride=2), 16), ((15, 15), 7, dict(padding=3), 200),
])
def test_fused_plan_tiles_cover_the_output_and_threads_fit(spatial, kernel, opts, kp):
    g = _geom(spatial, kernel, **opts)
    plan = fused_plan(g, kp)
    g3 = g.as_3d()
    _, oh, ow = g3["out_spatial"]
    assert plan.tw % 4 == 0 and plan.th * plan.tw <= 256
    assert plan.tiles_w * plan.tw >= ow > (plan.tiles_w - 1) * plan.tw
    assert plan.tiles_h * plan.th >= oh > (plan.tiles_h - 1) * plan.th
    assert (plan.th * plan.tw // 4) * plan.kg <= 256  # pointwise threads
    assert plan.kp_blocks * plan.kg * plan.kt >= kp > (plan.kp_blocks - 1) * plan.kg * plan.kt
    (_, kh, kw), (_, sh, sw), (_, dh, dw) = g3["kernel"], g3["stride"], g3["dilation"]
    assert plan.rows_max == (plan.th - 1) * sh + (kh - 1) * dh + 1  # the kernel's window rows
    assert plan.pitch >= (plan.tw - 1) * sw + (kw - 1) * dw + 1 + 3  # + the vector shift
    assert plan.pitch % 4 == 0 and plan.smem <= SMEM_LIMIT


def test_backward_method_choice_and_errors():
    dw = _geom((8, 8), padding=1)
    dense = ConvGeometry.from_shapes((2, 8, 8, 8), (4, 8, 3, 3), padding=1)
    assert backward_method(dw, "auto").name == "depthwise"
    assert backward_method(dense, "auto").name == "implicit_gemm"
    assert backward_method(dw, "implicit_gemm").name == "implicit_gemm"
    with pytest.raises(ValueError, match="groups == input channels"):
        backward_method(dense, "depthwise")
    with pytest.raises(ValueError, match="method must be one of"):
        backward_method(dw, "winograd")


def _model_plane_items(geom, plan):
    """Which outputs the plane kernel's blocks, rounds, lane groups and lanes write (a model of
    depthwise_plane.cu's loops): a count per output element, and the most planes a block
    touches."""
    n, k = geom.batch, geom.out_channels
    oh, ow = geom.as_3d()["out_spatial"][1:]
    planes = n * k
    count = [[[0] * ow for _ in range(oh)] for _ in range(planes)]
    total, groups, most = planes * plan.cpp, plan.warps * plan.gw, 0
    for b in range(plan.blocks(planes)):
        i0, i1 = b * plan.ipb, min(b * plan.ipb + plan.ipb, total)
        most = max(most, (i1 - 1) // plan.cpp - i0 // plan.cpp + 1)
        for base in range(i0, i1, groups):
            for lane_group in range(groups):  # warp * gw + grp
                item = base + lane_group
                if item >= i1:
                    continue
                plane, rem = divmod(item, plan.cpp)
                chunk, strip = divmod(rem, plan.strips)
                oh0, ow0 = chunk * plan.ry, strip * 4 * plan.qw - plan.d
                # aligned input quads: the window starts e columns before the strip's first
                assert (plan.stride * ow0 - geom.as_3d()["pad_lo"][2] - plan.e) % 4 == 0
                for q in range(plan.qw):
                    for i in range(plan.ry):
                        for j in range(4):
                            r, c = oh0 + i, ow0 + 4 * q + j
                            if r < oh and 0 <= c < ow:
                                count[plane][r][c] += 1
    return count, most


@pytest.mark.parametrize("sp,k,pad,stride", [
    ((56, 56), (3, 3), 1, 1), ((7, 7), (3, 3), 1, 1), ((5, 130), (3, 3), 1, 1),
    ((6, 257), (2, 5), 4, 1), ((9, 1), (3, 1), 0, 1), ((3, 4), (7, 7), 6, 1),
    ((20, 64), (3, 5), 4, 1), ((30, 12), (1, 16), 8, 1),
    # stride 2: every window offset e, strips of 128 outputs over 257-513 input columns
    ((56, 56), (3, 3), 1, 2), ((15, 13), (5, 5), 2, 2), ((9, 300), (7, 7), 3, 2),
    ((8, 517), (3, 3), 0, 2), ((11, 9), (3, 3), 2, 2)])
@pytest.mark.parametrize("warps,rounds", [(None, None), (4, 1), (8, 3), (5, 2)])
def test_plane_plan_covers_every_output_once(sp, k, pad, stride, warps, rounds):
    g = ConvGeometry.from_shapes((2, 3, *sp), (6, 1, *k), padding=pad, groups=3, stride=stride,
                                 dtype="float32")
    kw = {} if warps is None else dict(warps=warps, rounds=rounds)
    plan = plane_plan(g, **kw)
    assert plan is not None
    assert plan.gw * plan.qw <= 32 and 4 * plan.qw <= 128 and plan.ipb % (plan.warps * plan.gw) == 0
    assert plan.strips * 4 * plan.qw >= g.out_spatial[1] + plan.d  # strips cover the shifted row
    count, most = _model_plane_items(g, plan)
    assert all(v == 1 for plane in count for row in plane for v in row)
    assert most <= plan.sp  # the staged taps cover every plane a block touches
    assert plan.smem <= 48 * 1024 - 1024


def test_plane_plan_applies_only_where_the_kernel_does():
    base = dict(padding=1)
    assert plane_plan(_geom((56, 56), **base)) is not None
    assert plane_plan(_geom((50,), padding=2)) is not None  # 1-D: one row per plane
    assert plane_plan(_geom((56, 56), dtype="float64", padding=1)).ry == 2
    assert plane_plan(_geom((56, 56), dtype="float16", padding=1)).itemsize == 4  # float math
    # stride 2: square 3x3, 5x5, 7x7 filters; the window offset is -PW mod 4, strips unshifted
    for k, pad, e in ((3, 1, 3), (5, 2, 2), (7, 3, 1), (3, 0, 0), (3, (1, 2), 2)):
        g = _geom((32, 32), k=k, stride=2, padding=pad)
        p = plane_plan(g)
        assert (p.stride, p.kf, p.e, p.d) == (2, k, e, 0)
        assert p.vec_out == (g.out_spatial[1] % 4 == 0)
    refused = [_geom((56, 56), layout="NHWC", **base), _geom((56, 56), dilation=2, padding=2),
               _geom((20, 40), k=17, padding=8), _geom((4, 9, 10), padding=1),
               _geom((56, 56), stride=(2, 1), padding=1), _geom((56, 56), stride=3, padding=1),
               _geom((56, 56), k=4, stride=2, padding=1), _geom((56, 56), k=(3, 5), stride=2),
               _geom((56, 56), stride=2, dilation=2, padding=2), _geom((50,), stride=2, padding=1)]
    assert all(plane_plan(g) is None for g in refused)
    g = _geom((9, 12), padding=1)
    assert contiguous_planes(g, (8 * 108, 108, 0, 12, 1))
    assert not contiguous_planes(g, (8 * 108, 108, 0, 13, 1))  # padded rows
    assert not contiguous_planes(g, (108, 2 * 108, 0, 12, 1))  # batch-minor
    # (144, 56^2) at batch 32 takes two rounds per block, a small grid (batch 2) one
    large, small = (plane_plan(ConvGeometry.from_shapes((n, 144, 56, 56), (144, 1, 3, 3), padding=1,
                                                         groups=144, dtype="float32"))
                    for n in (32, 2))
    assert (large.rounds, small.rounds) == (2, 1) and large.blocks(32 * 144) >= 1024
