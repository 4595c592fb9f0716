"""Channels-last depthwise plans (cupyconv._depthwise.channels_last), on the CPU: which problems and
arrays take the channels-last kernels, the vector width chosen for C and alignment, that plans
cover every channel and pixel within the hardware limits, and the kernels' index math (runs, the
row walk's window entries, the transposed run alignment, backward-weight passes and chunks)
emulated in NumPy against the float64 reference."""

import math
from types import SimpleNamespace

import numpy as np
import pytest

from cupyconv import reference
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import (DEPTHWISE_CL_VECS, DEPTHWISE_CL_WGRAD_VEC, KERNEL_CONSTANTS,
                                    REGISTRY, depthwise_cl_module, depthwise_cl_wgrad_module)
from cupyconv._core.launch import element_strides
from cupyconv._depthwise import channels_last as cl

RX = KERNEL_CONSTANTS["DWCL_RX"]


def _geom(sp, c=8, k=3, mult=1, layout="NHWC", dtype="float32", **opts):
    nd = len(sp)
    ks = k if isinstance(k, tuple) else (k,) * nd
    if layout == "NHWC":
        xs, ws = (2, *sp, c), (c * mult, *ks, 1)
    else:
        xs, ws = (2, c, *sp), (c * mult, 1, *ks)
    return ConvGeometry.from_shapes(xs, ws, groups=c, layout=layout, dtype=dtype, **opts)


def _fake(shape, dtype="float32", ptr=0, strides=None):
    """Enough of a CuPy array for vector_width and element_strides: shape, strides, itemsize and
    a base address."""
    item = np.dtype(np.float16 if dtype == "bfloat16" else dtype).itemsize
    if strides is None:
        strides = [item * math.prod(shape[i + 1:]) for i in range(len(shape))]
    return SimpleNamespace(shape=tuple(shape), strides=tuple(strides), itemsize=item,
                           data=SimpleNamespace(ptr=ptr))


def _operands(g, *arrays):
    return tuple((a, element_strides(a, True)) for a in arrays)


@pytest.mark.parametrize("dtype", list(DEPTHWISE_CL_VECS))
@pytest.mark.parametrize("c", [1, 2, 3, 4, 6, 8, 12, 16, 144, 17])
def test_vector_width_follows_channels(dtype, c):
    g = _geom((5, 7), c=c, padding=1, dtype=dtype)
    x, y = _fake(g.input_shape, dtype), _fake(g.output_shape, dtype)
    vec = cl.vector_width(g, _operands(g, x, y))
    widest = DEPTHWISE_CL_VECS[dtype][0]
    assert vec == next(v for v in DEPTHWISE_CL_VECS[dtype] if c % v == 0)
    assert vec * x.itemsize <= 16 and (c % widest or vec == widest)
    # backward-weight: at most DEPTHWISE_CL_WGRAD_VEC channels per thread (its accumulators)
    wvec = cl.vector_width(g, _operands(g, x, y), wgrad=True)
    assert wvec == next(v for v in DEPTHWISE_CL_VECS[dtype] if c % v == 0 and v <= DEPTHWISE_CL_WGRAD_VEC)


def test_vector_width_follows_alignment_and_strides():
    g = _geom((5, 7), c=16, padding=1, dtype="float16")
    y = _fake(g.output_shape, "float16")
    assert cl.vector_width(g, _operands(g, _fake(g.input_shape, "float16"), y)) == 8
    # base 8 bytes past a 16-byte boundary: quads; 4 or 2 bytes past: scalars
    assert cl.vector_width(g, _operands(g, _fake(g.input_shape, "float16", ptr=8), y)) == 4
    assert cl.vector_width(g, _operands(g, _fake(g.input_shape, "float16", ptr=4), y)) == 1
    assert cl.vector_width(g, _operands(g, _fake(g.input_shape, "float16", ptr=2), y)) == 1
    # an output buffer misaligned the same way narrows the vector too
    assert cl.vector_width(g, _operands(g, _fake(g.input_shape, "float16"),
                                        _fake(g.output_shape, "float16", ptr=6))) == 1
    # a W stride of 20 elements (a channel slice of a wider array): quads
    n, h, w, c = g.input_shape
    sliced = _fake(g.input_shape, "float16", strides=(2 * h * w * 20, 2 * w * 20, 2 * 20, 2))
    assert cl.vector_width(g, _operands(g, sliced, y)) == 4
    # a negative W stride (x[:, :, ::-1]) keeps vectors: its strides are multiples of C
    flipped = _fake(g.input_shape, "float16", ptr=2 * (w - 1) * c,
                    strides=(2 * h * w * c, 2 * w * c, -2 * c, 2))
    assert cl.vector_width(g, _operands(g, flipped, y)) == 8


def test_channels_last_kernels_apply_only_where_they_should():
    nhwc = _geom((5, 7), c=8, padding=1)
    x, y = _fake(nhwc.input_shape), _fake(nhwc.output_shape)
    assert cl.vector_width(nhwc, _operands(nhwc, x, y)) == 4
    # a channel stride other than 1 (an NCHW array viewed as NHWC): the gather kernels
    n, h, w, c = nhwc.input_shape
    permuted = _fake(nhwc.input_shape, strides=(4 * c * h * w, 4 * w, 4, 4 * h * w))
    assert cl.vector_width(nhwc, _operands(nhwc, permuted, y)) == 0
    # ... unless there is one channel
    one = _geom((5, 7), c=1, padding=1)
    odd = _fake(one.input_shape, strides=(4 * h * w, 4 * w, 4, 4 * 99))
    assert cl.vector_width(one, _operands(one, odd, _fake(one.output_shape))) == 1
    # a channel multiplier and channels-first: not these kernels
    mult = _geom((5, 7), c=8, mult=2, padding=1)
    assert cl.vector_width(mult, _operands(mult, _fake(mult.input_shape),
                                           _fake(mult.output_shape))) == 0
    assert not cl.applies(mult)
    nchw = _geom((5, 7), c=8, padding=1, layout="NCHW")
    assert cl.vector_width(nchw, ((_fake(nchw.input_shape), (0, 1, 0, 0, 0)),)) == 0
    assert not cl.applies(nchw) and cl.applies(nhwc)


@pytest.mark.parametrize("k,stride,dilation,expect", [
    (3, 1, 1, (3, 1)), (5, 2, 1, (5, 2)), (7, 1, 1, (7, 1)), (3, 3, 1, (0, 0)), (3, 1, 2, (0, 0)),
    (4, 1, 1, (0, 0)), ((3, 5), 1, 1, (0, 0)), (3, (2, 1), 1, (3, 1)), (3, 1, (2, 1), (3, 1)),
    (3, (1, 2), (1, 2), (0, 0)),
])
def test_walk_variant(k, stride, dilation, expect):
    g = _geom((9, 9), k=k, stride=stride, dilation=dilation)
    assert cl.walk_variant(g) == expect


def test_registry_holds_every_channels_last_binary():
    for dtype in DEPTHWISE_CL_VECS:
        for kf in (0, 3, 5, 7):
            assert depthwise_cl_module(dtype, kf) in REGISTRY
            assert depthwise_cl_wgrad_module(dtype, kf) in REGISTRY


@pytest.mark.parametrize("c,dtype", [(1, "float32"), (144, "float32"), (144, "float16"), (960, "float32"),
                                     (4100, "float64"), (24, "bfloat16")])
@pytest.mark.parametrize("k", [3, 7, 11])
def test_plans_cover_channels_and_fit(c, dtype, k):
    g = _geom((14, 14), c=c, k=k, padding=k // 2, dtype=dtype)
    acc = 8 if dtype == "float64" else 4
    for vec in DEPTHWISE_CL_VECS[dtype]:
        if c % vec:
            continue
        for transposed in (False, True):
            p = cl.pass_plan(g, transposed, vec)
            assert p is not None
            assert p.cgb * p.by <= KERNEL_CONSTANTS["DW_THREADS"] and p.cgb <= cl.MAX_CGB
            assert p.cblocks * p.cgb * vec >= c and (p.cblocks - 1) * p.cgb * vec < c
            assert k * k * p.cgb * vec * acc <= cl.SMEM_LIMIT
        if vec > DEPTHWISE_CL_WGRAD_VEC:
            with pytest.raises(ValueError, match="at most"):
                cl.wgrad_plan(g, vec)
            continue
        wp = cl.wgrad_plan(g, vec)
        p = wp.plan
        assert p.cblocks * p.cgb * vec >= c
        assert wp.chunks * wp.runs_per_chunk >= p.runs > (wp.chunks - 1) * wp.runs_per_chunk
        assert p.cgb * p.by * vec * acc <= cl.SMEM_LIMIT


def test_huge_filters_fall_back():
    g = _geom((40, 40), c=16, k=61, padding=30, dtype="float16")
    assert cl.pass_plan(g, False, 8) is None  # 3721 taps x 8 channels in float32: no room
    assert cl.pass_plan(g, False, 1) is not None


# ---- the kernels' index math in NumPy ---------------------------------------------------------
def _src_coord(o, t, s, d, p, n, transposed):
    """dw::src_coord (src_coord.cuh)."""
    if not transposed:
        i = o * s - p + t * d
        return i if 0 <= i < n else -1
    q = o + p - t * d
    if q < 0:
        return -1
    i = q // s
    return i if i * s == q and i < n else -1


def _walk(kf, s, transposed):
    """dwcl::walk: (NJ, entry(r, kw), first(x0, P))."""
    off = s * ((kf - 1 + s - 1) // s)
    if transposed:
        nj = (RX - 1 + off) // s + 1

        def entry(r, kw):
            return (r - kw + off) // s if (r - kw + off) % s == 0 else -1

        def first(x0, p):
            return (x0 + p) // s - off // s
    else:
        nj = (RX - 1) * s + kf

        def entry(r, kw):
            return r * s + kw

        def first(x0, p):
            return x0 * s - p
    return nj, entry, first


def _dims(g):
    g3 = g.as_3d()
    return (g3["spatial"], g3["out_spatial"], g3["kernel"], g3["stride"], g3["dilation"],
            g3["pad_lo"])


def _emulate_pass(g, plan, transposed, src, w):
    """depthwise_cl on (N, D, H, W, C) float64 arrays, all channels at once; also counts the
    stores per destination pixel."""
    (i3, o3, k3, s3, d3, p3) = _dims(g)
    src3, dst3 = (o3, i3) if transposed else (i3, o3)
    n_, c = g.batch, g.in_channels
    dst = np.full((n_, *dst3, c), np.nan)
    stores = np.zeros((n_, *dst3), int)
    wt = w.reshape(c, -1)
    rounds = cl._rounds(plan)
    blocks = math.ceil(plan.runs / (plan.by * rounds))
    nj, entry, first = _walk(plan.kf, plan.s, transposed) if plan.kf else (0, None, None)
    for bx in range(blocks):
        for ty in range(plan.by):
            for rnd in range(rounds):
                run = (bx * rounds + rnd) * plan.by + ty
                if run >= plan.runs:
                    break
                row, rr = divmod(run, plan.runs_per_row)
                x0 = rr * RX - plan.lead
                row, hr = divmod(row, -(-dst3[1] // plan.ry))  # plan.ry rows per run
                n, d = divmod(row, dst3[0])
                for h in range(hr * plan.ry, min(hr * plan.ry + plan.ry, dst3[1])):
                    acc = np.zeros((RX, c))
                    for kd in range(k3[0]):
                        sd = _src_coord(d, kd, s3[0], d3[0], p3[0], src3[0], transposed)
                        if sd < 0:
                            continue
                        for kh in range(k3[1]):
                            sh = _src_coord(h, kh, s3[1], d3[1], p3[1], src3[1], transposed)
                            if sh < 0:
                                continue
                            srow = src[n, sd, sh]
                            taps = wt[:, (kd * k3[1] + kh) * k3[2]:][:, :k3[2]]
                            if plan.kf:
                                f = first(x0, p3[2])
                                for j in range(nj):
                                    col = f + j
                                    v = srow[col] if 0 <= col < src3[2] else 0.0
                                    for r in range(RX):
                                        for kw in range(plan.kf):
                                            if entry(r, kw) == j:
                                                acc[r] += v * taps[:, kw]
                            else:
                                for r in range(RX):
                                    for kw in range(k3[2]):
                                        sw = _src_coord(x0 + r, kw, s3[2], d3[2], p3[2], src3[2],
                                                        transposed)
                                        if sw >= 0:
                                            acc[r] += srow[sw] * taps[:, kw]
                    for r in range(RX):
                        col = x0 + r
                        if 0 <= col < dst3[2]:
                            dst[n, d, h, col] = acc[r]
                            stores[n, d, h, col] += 1
    return dst, stores


def _emulate_wgrad(g, wp, x, dy):
    """depthwise_cl_wgrad and the chunk reduce on float64 arrays, all channels at once."""
    (i3, o3, k3, s3, d3, p3) = _dims(g)
    p = wp.plan
    c, taps = g.in_channels, math.prod(k3)
    tp = cl.wgrad_taps_per_pass(p.vec)
    pr = max(1, tp // p.kf) if p.kf else 1
    na = pr * p.kf if p.kf else tp
    partial = np.full((wp.chunks, c, taps), np.nan)
    nj, entry, first = _walk(p.kf, p.s, False) if p.kf else (0, None, None)
    for chunk in range(wp.chunks):
        for pas in range(wp.passes):
            first_tap = pas * pr * k3[2] if p.kf else pas * tp
            rows = []
            r_begin = chunk * wp.runs_per_chunk
            r_end = min(p.runs, r_begin + wp.runs_per_chunk)
            for ty in range(p.by):
                acc = np.zeros((na, c))
                for run in range(r_begin + ty, r_end, p.by):
                    row, rr = divmod(run, p.runs_per_row)
                    x0 = rr * RX
                    row, oh = divmod(row, o3[1])
                    n, od = divmod(row, o3[0])
                    g_ = [dy[n, od, oh, x0 + r] if x0 + r < o3[2] else np.zeros(c) for r in range(RX)]
                    if p.kf:
                        for q in range(pr):
                            kr = pas * pr + q
                            if kr >= k3[0] * k3[1]:
                                break
                            id_ = _src_coord(od, kr // k3[1], s3[0], d3[0], p3[0], i3[0], False)
                            ih = _src_coord(oh, kr % k3[1], s3[1], d3[1], p3[1], i3[1], False)
                            if id_ < 0 or ih < 0:
                                continue
                            f = first(x0, p3[2])
                            for j in range(nj):
                                col = f + j
                                v = x[n, id_, ih, col] if 0 <= col < i3[2] else 0.0
                                for r in range(RX):
                                    for kw in range(p.kf):
                                        if entry(r, kw) == j and x0 + r < o3[2]:
                                            acc[q * p.kf + kw] += g_[r] * v
                    else:
                        for t in range(na):
                            tap = pas * tp + t
                            if tap >= taps:
                                break
                            kd, rem = divmod(tap, k3[1] * k3[2])
                            kh, kw = divmod(rem, k3[2])
                            id_ = _src_coord(od, kd, s3[0], d3[0], p3[0], i3[0], False)
                            ih = _src_coord(oh, kh, s3[1], d3[1], p3[1], i3[1], False)
                            if id_ < 0 or ih < 0:
                                continue
                            for r in range(RX):
                                iw = _src_coord(x0 + r, kw, s3[2], d3[2], p3[2], i3[2], False)
                                if iw >= 0 and x0 + r < o3[2]:
                                    acc[t] += g_[r] * x[n, id_, ih, iw]
                rows.append(acc)
            for t in range(na):
                if first_tap + t >= taps:
                    break
                partial[chunk, :, first_tap + t] = sum(a[t] for a in rows)
    assert not np.isnan(partial).any()  # every partial sum is written
    return partial.sum(axis=0)


# (spatial, k, options): square kernels on the row walk at stride 1 and 2, the any-shape variant
# (even size, stride 3, dilation in W, rectangular), every padding form, 1-d and 3-d.
EMULATED = [
    ((6, 11), 3, dict(padding=1)),
    ((7, 9), 3, dict(padding=0, stride=2)),
    ((5, 13), 5, dict(padding="same", stride=2)),
    ((9, 10), 7, dict(padding=[(3, 1), (2, 4)])),
    ((6, 12), 5, dict(padding=[(0, 2), (3, 0)], stride=(1, 2))),
    ((8, 9), 3, dict(padding=(1, 2), stride=(2, 1), dilation=(2, 1))),
    ((5, 11), 4, dict(padding="same")),
    ((9, 10), 3, dict(padding=2, stride=3)),
    ((5, 12), 3, dict(padding=2, dilation=2)),
    ((4, 9), (3, 5), dict(padding=1, stride=2)),
    ((13,), 3, dict(padding=1, stride=2)),
    ((3, 4, 9), 3, dict(padding=1, stride=(2, 1, 2))),
]


@pytest.mark.parametrize("vec", [4, 1])
@pytest.mark.parametrize("sp,k,opts", EMULATED, ids=[str(i) for i in range(len(EMULATED))])
def test_emulated_kernels_match_reference(sp, k, opts, vec):
    c = 4
    g = _geom(sp, c=c, k=k, **opts)
    rng = np.random.default_rng(len(sp) * 100 + sum(sp))
    x = rng.uniform(-1, 1, g.input_shape)
    w = rng.uniform(-1, 1, g.weight_shape)
    dy = rng.uniform(-1, 1, g.output_shape)
    kw = dict(opts, groups=c, layout="NHWC")
    as5 = lambda a: a.reshape(a.shape[0], *((1,) * (5 - a.ndim)), *a.shape[1:])  # noqa: E731

    plan = cl.pass_plan(g, False, vec)
    y, stores = _emulate_pass(g, plan, False, as5(x), w)
    assert (stores == 1).all()
    np.testing.assert_allclose(y.reshape(g.output_shape), reference.conv(x, w, **kw), atol=1e-12)

    plan = cl.pass_plan(g, True, vec)
    assert plan.lead < max(plan.s, 1) and (plan.kf == 0 or RX % plan.s == 0)
    dx, stores = _emulate_pass(g, plan, True, as5(dy), w)
    assert (stores == 1).all()
    np.testing.assert_allclose(dx.reshape(g.input_shape),
                               reference.conv_backward_data(dy, w, g.input_shape, **kw), atol=1e-12)

    wp = cl.wgrad_plan(g, min(vec, DEPTHWISE_CL_WGRAD_VEC))
    dw = _emulate_wgrad(g, wp, as5(x), as5(dy))
    np.testing.assert_allclose(dw.reshape(g.weight_shape),
                               reference.conv_backward_weight(x, dy, g.weight_shape, **kw), atol=1e-12)


def test_emulated_wgrad_with_several_passes_and_chunks(monkeypatch):
    """A 7x7 float64 filter at VEC = 2 takes several passes of kernel rows; a 6x6 filter at VEC = 4
    several passes of taps; one run per thread gives several chunks."""
    monkeypatch.setattr(cl, "WGRAD_MIN_RUNS", 1)
    for k, dtype, vec in ((7, "float64", 2), (6, "float32", 4)):
        g = _geom((9, 60), c=4, k=k, padding=3, dtype=dtype)
        wp = cl.wgrad_plan.__wrapped__(g, vec)
        assert wp.passes > 1 and wp.chunks > 1
        rng = np.random.default_rng(k)
        x, dy = rng.uniform(-1, 1, g.input_shape), rng.uniform(-1, 1, g.output_shape)
        dw = _emulate_wgrad(g, wp, x[:, None], dy[:, None])
        ref = reference.conv_backward_weight(x, dy, g.weight_shape, padding=3, groups=4,
                                             layout="NHWC")
        np.testing.assert_allclose(dw.reshape(g.weight_shape), ref, atol=1e-12)


def test_pass_launcher_routes_channels_last_problems(monkeypatch):
    """The depthwise pass launcher takes the channels-last kernel when it is given a width and a
    plan fits, else the gather kernel exactly as before (no GPU: functions and launches are
    stand-ins that record what would run)."""
    from cupyconv._depthwise import launch

    monkeypatch.setattr(launch.jit, "get_function", lambda module, name, *a: name)
    monkeypatch.setattr(launch, "Launch", lambda fn, *a, **k: fn)
    monkeypatch.setattr(cl, "pass_launch", lambda *a: "depthwise_cl")
    route = launch._pass_launch.__wrapped__
    g = _geom((9, 9), c=16, padding=1)
    strides = element_strides(_fake(g.input_shape), True)
    for transposed in (False, True):
        assert route(g, transposed, True, strides, False, True, True, 4, 0) == "depthwise_cl"
        assert route(g, transposed, True, strides, False, True, True, 0, 0) == "depthwise_gather"
    huge = _geom((40, 40), c=16, k=61, padding=30, dtype="float16")
    assert route(huge, False, False, element_strides(_fake(huge.input_shape, "float16"), True),
                 False, True, True, 8, 0) == "depthwise_gather"
