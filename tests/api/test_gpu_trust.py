"""Regression tests for the faults of issue 14: negative-stride views, strided or reversed bias,
problems of more than 2**31 pixels, first calls on concurrent streams, CUDA-graph capture, huge
strides (hang), huge sizes (ValueError, not OverflowError/OutOfMemoryError) and ``out=`` aliasing
an input.  Results are judged against cupyconv.reference in float64 (trust_helpers.py)."""

import contextlib
import fcntl
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import threading

import numpy as np
import pytest

import cupyconv as cc
from cupyconv import reference

from trust_helpers import (boundary_rows, chunked_check, crop_rows_check, describe_view, poison,
                           rel_error, tolerance, uniform)
from gpu_cases import rng_for

pytestmark = pytest.mark.gpu

DTYPES = ("float16", "bfloat16", "float32", "float64")
LAYOUTS = ("NCHW", "NHWC")


def _act(layout, n, c, sp):
    return (n, *sp, c) if layout == "NHWC" else (n, c, *sp)


def _wt(layout, k, cg, ker):
    return (k, *ker, cg) if layout == "NHWC" else (k, cg, *ker)


def _check(got, ref, dtype, what):
    err, tol = rel_error(got, ref), tolerance(dtype, ref)
    assert err <= tol, f"{what}: relative error {err:.3e} > {tol:.1e}"


# ------------------------------------------------------------------- negative-stride views
FLIPS = {
    "last": (Ellipsis, slice(None, None, -1)),                        # a[..., ::-1]
    "axis2": (slice(None), slice(None), slice(None, None, -1)),       # a[:, :, ::-1]
    "all": (slice(None),) + (slice(None, None, -1),) * 3,             # every axis but the batch
}
# (kernel, stride): 3x3 on the implicit view, 1x1 on the plain GEMM path
FLIP_CASES = [(3, 1), (3, 2), (1, 1), (1, 2)]


@pytest.mark.parametrize("kernel,stride", FLIP_CASES, ids=lambda v: str(v))
@pytest.mark.parametrize("flip", sorted(FLIPS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_negative_stride_x_forward(layout, dtype, flip, kernel, stride):
    import cupy

    rng = rng_for("flip-x", layout, dtype, flip, kernel, stride)
    xs, ws = _act(layout, 2, 4, (9, 11)), _wt(layout, 6, 2, (kernel, kernel))
    x = cupy.asarray(uniform(rng, xs, dtype))[FLIPS[flip]]
    w, b = cupy.asarray(uniform(rng, ws, dtype)), cupy.asarray(uniform(rng, (6,), dtype))
    opts = dict(stride=stride, padding=kernel // 2, groups=2, layout=layout)
    ref = reference.conv(x.get(), w.get(), b.get(), **opts)
    for method in ("implicit_gemm", "auto", "im2col_gemm", "direct"):
        y = cc.conv(x, w, b, method=method, **opts)
        _check(y, ref, dtype, f"conv {method} of x {describe_view(x)}")


@pytest.mark.parametrize("variant", ["grouped", "depthwise"])
@pytest.mark.parametrize("op", ["backward_data", "transpose"])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("flip", sorted(FLIPS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_negative_stride_dy_backward(layout, dtype, flip, stride, op, variant):
    import cupy

    rng = rng_for("flip-dy", layout, dtype, flip, stride, op, variant)
    c, g, k = (4, 2, 6) if variant == "grouped" else (4, 4, 8)
    xs, ws = _act(layout, 2, c, (9, 11)), _wt(layout, k, c // g, (3, 3))
    opts = dict(stride=stride, padding=1, groups=g, layout=layout)
    ys = cc.output_shape(xs, ws, **opts)
    dy = cupy.asarray(uniform(rng, ys, dtype))[FLIPS[flip]]
    w = cupy.asarray(uniform(rng, ws, dtype))
    methods = ("auto", "implicit_gemm") + (("depthwise",) if variant == "depthwise" else ())
    if op == "backward_data":
        ref = reference.conv_backward_data(dy.get(), w.get(), xs, **opts)
    else:   # the transpose of this conv maps dy-shaped inputs back onto xs
        ref = reference.conv_transpose(dy.get(), w.get(), **opts)
        assert ref.shape == xs
    for method in methods:
        dx = poison(cupy.empty(xs, dtype))
        if op == "backward_data":
            got = cc.conv_backward_data(dy, w, xs, method=method, out=dx, **opts)
        else:
            got = cc.conv_transpose(dy, w, method=method, out=dx, **opts)
        assert got is dx
        _check(dx, ref, dtype, f"{op} {method} of dy {describe_view(dy)}")


# --------------------------------------------------------------------- strided / reversed bias
BIAS_VIEWS = {"step2": slice(None, None, 2), "reversed": slice(None, None, -1),
              "step-2": slice(None, None, -2), "offset": slice(1, None)}
# kind -> (c, k, groups, kernel)
BIAS_KINDS = {"dense": (5, 7, 1, 3), "pointwise": (8, 8, 1, 1), "grouped": (4, 6, 2, 3),
              "depthwise": (6, 12, 6, 3)}


def _bias_view(cupy, host_b, view):
    """A view of a new buffer equal to ``host_b`` through the slice ``BIAS_VIEWS[view]``."""
    sl = BIAS_VIEWS[view]
    k = host_b.shape[0]
    if view == "offset":
        buf = cupy.full(k + 1, np.nan, dtype=host_b.dtype)
    else:
        buf = cupy.full(2 * k, np.nan, dtype=host_b.dtype)
    v = buf[sl][:k]
    v[...] = cupy.asarray(host_b)
    assert v.shape == (k,)
    return v


@pytest.mark.parametrize("view", sorted(BIAS_VIEWS))
@pytest.mark.parametrize("kind", sorted(BIAS_KINDS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_strided_bias_forward(layout, dtype, kind, view):
    import cupy

    rng = rng_for("bias", layout, dtype, kind, view)
    c, k, g, ker = BIAS_KINDS[kind]
    xs, ws = _act(layout, 2, c, (7, 8)), _wt(layout, k, c // g, (ker, ker))
    opts = dict(padding=ker // 2, groups=g, layout=layout)
    xh, wh, bh = uniform(rng, xs, dtype), uniform(rng, ws, dtype), uniform(rng, (k,), dtype)
    x, w, b = cupy.asarray(xh), cupy.asarray(wh), _bias_view(cupy, bh, view)
    ref = reference.conv(xh, wh, bh, **opts)
    methods = ["auto", "implicit_gemm", "im2col_gemm", "direct"] + (["depthwise"] if g == c else [])
    for method in methods:
        y = poison(cupy.empty(ref.shape, dtype))
        cc.conv(x, w, b, method=method, out=y, **opts)
        _check(y, ref, dtype, f"conv {method} with bias {describe_view(b)}")


@pytest.mark.parametrize("view", ["step2", "reversed", "step-2", "offset"])
@pytest.mark.parametrize("method", ["fused", "unfused"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_strided_bias_separable(layout, dtype, method, view):
    import cupy

    rng = rng_for("sep-bias", layout, dtype, method, view)
    c, m, kp = 16, 2, 8
    xs = _act(layout, 2, c, (12, 13))
    wdws, wpws = _wt(layout, c * m, 1, (3, 3)), _wt(layout, kp, c * m, (1, 1))
    xh, wdw, wpw = (uniform(rng, s, dtype) for s in (xs, wdws, wpws))
    bdw, bpw = uniform(rng, (c * m,), dtype), uniform(rng, (kp,), dtype)
    x, w_dw, w_pw = (cupy.asarray(a) for a in (xh, wdw, wpw))
    t = np.clip(reference.conv(xh, wdw, bdw, padding=1, groups=c, layout=layout), 0, 6)
    ref = reference.conv(t, wpw, bpw, layout=layout)
    tol = tolerance(dtype, ref, fp16_factor=4.0, fp16_floor=2e-4)
    for which in ("bias_dw", "bias_pw", "both"):
        b_dw = _bias_view(cupy, bdw, view) if which in ("bias_dw", "both") else cupy.asarray(bdw)
        b_pw = _bias_view(cupy, bpw, view) if which in ("bias_pw", "both") else cupy.asarray(bpw)
        y = poison(cupy.empty(ref.shape, dtype))
        cc.separable_conv(x, w_dw, w_pw, b_dw, b_pw, padding=1, activation="relu6", layout=layout,
                          method=method, out=y)
        err = rel_error(y, ref)
        assert err <= tol, (f"separable {method}, {which} strided ({describe_view(b_dw)}, "
                            f"{describe_view(b_pw)}): error {err:.3e} > {tol:.1e}")


# ------------------------------------------------------------------ more than 2**31 pixels
HUGE_CASES = [("NCHW", 1, 46341), ("NHWC", 1, 46341), ("NCHW", 2, 32769), ("NHWC", 2, 32769)]


@contextlib.contextmanager
def _one_huge_test_at_a_time():
    """Serialize the huge tests across pytest-xdist workers (one GPU, ~26 GB each), and give the
    memory back to the device afterwards."""
    import cupy

    path = os.path.join(tempfile.gettempdir(), "cupyconv-huge-tests.lock")
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            cupy.get_default_memory_pool().free_all_blocks()
            yield
        finally:
            cupy.cuda.Device().synchronize()
            cupy.get_default_memory_pool().free_all_blocks()
            fcntl.flock(f, fcntl.LOCK_UN)


def _fill_uniform(cupy, a, layout, seed):
    """Fill a huge (N=1) activation with uniform(-1, 1) values, a block of rows at a time."""
    rs = cupy.random.RandomState(seed)
    cf = a[0] if layout == "NCHW" else a[0].transpose(2, 0, 1)
    c, h, w = cf.shape
    for r0 in range(0, h, 2048):
        r1 = min(h, r0 + 2048)
        cf[:, r0:r1, :] = rs.uniform(-1, 1, size=(c, r1 - r0, w), dtype=cupy.float32)


def _bands(rows):
    """Contiguous runs [a, b) covering ``rows`` (each widened by 2 rows on both sides)."""
    runs = []
    for r in sorted(rows):
        a, b = r - 2, r + 3
        if runs and a <= runs[-1][1]:
            runs[-1][1] = max(runs[-1][1], b)
        else:
            runs.append([a, b])
    return [(max(a, 0), b) for a, b in runs]


@pytest.mark.slow
@pytest.mark.parametrize("op", ["forward", "backward_data", "backward_weight"])
@pytest.mark.parametrize("layout,c,size", HUGE_CASES, ids=lambda v: str(v))
def test_more_than_2_31_pixels(layout, c, size, op):
    """3x3, padding 1, float32, N=1, groups=1: (1, 1, 46341, 46341) has 46341**2 > 2**31 pixels;
    (1, 2, 32769, 32769) has 2 * 32769**2 > 2**31 elements.  Judged three ways: every element
    against a float64 reference built chunk by chunk from plain CuPy arithmetic, the rows around
    each 2**31 crossing (and the first, middle and last rows) against cupyconv.reference on the
    few input rows they depend on, and (backward-weight) the gradient of dy restricted to bands
    of rows around the crossings against the reference of those bands."""
    import cupy

    k = c
    xs, ws = _act(layout, 1, c, (size, size)), _wt(layout, k, c, (3, 3))
    rng = rng_for("huge", layout, c, size, op)
    wh = uniform(rng, ws, "float32")
    w = cupy.asarray(wh)
    opts = dict(padding=1, layout=layout)
    rows = boundary_rows(size, size, c, layout, extra=(int(rng.integers(0, size)),))
    methods = {"forward": ("auto", "implicit_gemm", "direct"),
               "backward_data": ("auto", "implicit_gemm"),
               "backward_weight": ("auto", "implicit_gemm")}[op]
    big = {}   # every huge array lives here: cleared (memory freed) even when a check fails
    with _one_huge_test_at_a_time():
        try:
            _huge_checks(cupy, big, op, methods, xs, ws, w, wh, layout, size, c, rows, opts)
        finally:
            big.clear()


def _huge_checks(cupy, big, op, methods, xs, ws, w, wh, layout, size, c, rows, opts):
    big["a"] = cupy.empty(xs, cupy.float32)           # x (forward, wgrad) or dy (bwd-data)
    _fill_uniform(cupy, big["a"], layout, 1)
    big["b"] = None
    if op == "backward_weight":
        big["b"] = cupy.empty(xs, cupy.float32)       # dy: same shape as x ("same" padding)
        _fill_uniform(cupy, big["b"], layout, 2)
    a, b = big["a"], big["b"]
    for method in methods:
        if op == "forward":
            big["res"] = cc.conv(a, w, method=method, **opts)
        elif op == "backward_data":
            big["res"] = cc.conv_backward_data(a, w, xs, method=method, **opts)
        else:
            big["res"] = cc.conv_backward_weight(a, b, ws, method=method, **opts)
        cupy.cuda.Device().synchronize()
        num, den = chunked_check(cupy, op, big["res"], a, b, wh, layout)
        # backward-weight sums 2**31 float32 products per element: allow for the rounding of
        # long float32 sums here; the band check below is the sharp one
        tol = 2e-3 if op == "backward_weight" else 1e-5
        assert num / den <= tol, f"{op} {method} {xs}: relative error {num / den:.3e}"
        if op != "backward_weight":
            err = crop_rows_check(op, big["res"], a, b, wh, layout, rows)
            assert err <= 1e-5, f"{op} {method} {xs}: rows {rows}: error {err:.3e}"
        big["res"] = None
        cupy.get_default_memory_pool().free_all_blocks()
    if op != "backward_weight":
        return
    # dy zero outside bands of rows around the crossings: dw is the sum of the bands'
    # gradients, each from a crop of a few rows
    bands = _bands(rows)
    dy_cf = b[0] if layout == "NCHW" else b[0].transpose(2, 0, 1)
    prev = 0
    for lo, hi in bands + [(size, size)]:
        dy_cf[:, prev:lo, :] = 0
        prev = hi
    ref = 0.0
    for lo, hi in bands:
        hi = min(hi, size)
        xlo, xhi = max(lo - 1, 0), min(hi + 1, size)
        top = 1 if xlo == lo else 0
        bottom = (hi - lo) - (xhi - xlo) - top + 2
        sl = ((slice(None), slice(xlo, xhi)) if layout == "NHWC" else
              (slice(None), slice(None), slice(xlo, xhi)))
        dsl = ((slice(None), slice(lo, hi)) if layout == "NHWC" else
               (slice(None), slice(None), slice(lo, hi)))
        ref = ref + reference.conv_backward_weight(
            a[sl].get(), b[dsl].get(), ws, padding=[(top, bottom), (1, 1)], layout=layout)
    for method in methods:
        dw = cc.conv_backward_weight(a, b, ws, method=method, **opts)
        err = rel_error(dw, ref)
        assert err <= 1e-4, (f"backward_weight {method} {xs}, dy nonzero only on rows "
                             f"{bands}: error {err:.3e}")


# ------------------------------------------------------------------------------- streams
_SPIN = r"""
extern "C" __global__ void spin(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""


def _make_busy(cupy, cycles=int(6e8)):
    """Queue a kernel that runs ~0.3 s (one thread spinning on the clock) on the current stream."""
    kernel = cupy.RawKernel(_SPIN, "spin")
    kernel((1,), (1,), (np.int64(cycles),))


STREAM_PROBLEMS = {
    # name: (pass, N, C, K, spatial, kernel, options)
    "dw-fwd": ("forward", 32, 144, 144, (56, 56), 3, dict(padding=1, groups=144)),
    "dw-fwd-s2": ("forward", 32, 144, 144, (56, 56), 3, dict(padding=1, stride=2, groups=144)),
    "dw-dgrad": ("backward_data", 32, 144, 144, (56, 56), 3, dict(padding=1, groups=144)),
    "dw-dgrad-s2": ("backward_data", 32, 144, 144, (56, 56), 3, dict(padding=1, stride=2,
                                                                      groups=144)),
    "dw-wgrad": ("backward_weight", 32, 144, 144, (56, 56), 3, dict(padding=1, groups=144)),
    "dw-wgrad-s2": ("backward_weight", 32, 144, 144, (56, 56), 3, dict(padding=1, stride=2,
                                                                        groups=144)),
    "separable-fused": ("separable", 8, 144, 24, (28, 28), 3, dict(padding=1)),
    "implicit-fwd": ("forward", 8, 64, 64, (28, 28), 3, dict(padding=1)),
    "implicit-dgrad-s2": ("backward_data", 8, 64, 96, (28, 28), 3, dict(padding=1, stride=2)),
    "implicit-wgrad": ("backward_weight", 8, 64, 64, (28, 28), 3, dict(padding=1)),
}


def _stream_problem(name, layout, dtype, batch_delta, rng):
    """(call(), reference) of a stream problem; call() runs on the current stream."""
    import cupy

    op, n, c, k, sp, ker, o = STREAM_PROBLEMS[name]
    n -= batch_delta                  # each test's problem is new to the process (a first call)
    opts = dict(o, layout=layout)
    xs = _act(layout, n, c, sp)
    if op == "separable":
        wdws, wpws = _wt(layout, c, 1, (ker, ker)), _wt(layout, k, c, (1, 1))
        xh, wdw, wpw = (uniform(rng, s, dtype) for s in (xs, wdws, wpws))
        bdw, bpw = uniform(rng, (c,), dtype), uniform(rng, (k,), dtype)
        t = np.clip(reference.conv(xh, wdw, bdw, groups=c, **opts), 0, 6)
        ref = reference.conv(t, wpw, bpw, layout=layout)
        dev = [cupy.asarray(a) for a in (xh, wdw, wpw, bdw, bpw)]
        return (lambda: cc.separable_conv(*dev, activation="relu6", method="fused", **opts)), ref
    ws = _wt(layout, k, c // o.get("groups", 1), (ker, ker))
    ys = cc.output_shape(xs, ws, **opts)
    xh, wh, dyh = uniform(rng, xs, dtype), uniform(rng, ws, dtype), uniform(rng, ys, dtype)
    x, w, dy = cupy.asarray(xh), cupy.asarray(wh), cupy.asarray(dyh)
    if op == "forward":
        return (lambda: cc.conv(x, w, **opts)), reference.conv(xh, wh, **opts)
    if op == "backward_data":
        return ((lambda: cc.conv_backward_data(dy, w, xs, **opts)),
                reference.conv_backward_data(dyh, wh, xs, **opts))
    return ((lambda: cc.conv_backward_weight(x, dy, ws, **opts)),
            reference.conv_backward_weight(xh, dyh, ws, **opts))


@pytest.mark.parametrize("non_blocking", [True, False], ids=["non_blocking", "default_flags"])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", sorted(STREAM_PROBLEMS))
def test_first_call_on_a_busy_stream_then_another_stream(name, layout, dtype, non_blocking):
    """The first call of a problem is queued on stream s1 behind a long kernel; the same problem
    runs at once on stream s2.  Both results must be right (nothing the first call prepares may
    be used by s2 before s1 has made it)."""
    import cupy

    rng = rng_for("streams", name, layout, dtype, non_blocking)
    call, ref = _stream_problem(name, layout, dtype, 0 if non_blocking else 1, rng)
    cupy.cuda.Device().synchronize()
    s1 = cupy.cuda.Stream(non_blocking=non_blocking)
    s2 = cupy.cuda.Stream(non_blocking=non_blocking)
    with s1:
        _make_busy(cupy)
        r1 = call()
    with s2:
        r2 = call()
    s2.synchronize()
    s1.synchronize()
    tol = tolerance(dtype, ref, fp16_factor=4.0, fp16_floor=2e-4) if name.startswith("sep") \
        else tolerance(dtype, ref)
    e1, e2 = rel_error(r1, ref), rel_error(r2, ref)
    assert e2 <= tol and e1 <= tol, f"{name}: error on s1 {e1:.3e}, on s2 {e2:.3e} (tol {tol:.1e})"


# ---------------------------------------------------------------------- CUDA-graph capture
GRAPH_TARGETS = ["conv-implicit_gemm", "conv-depthwise", "conv-direct", "dgrad", "dgrad-s2",
                 "dgrad-depthwise", "wgrad", "wgrad-depthwise", "separable-fused",
                 "separable-unfused"]


def _graph_problem(target, layout, rng):
    """(inputs: dict name -> device array, call(out), reference(host inputs), out shape)."""
    import cupy

    dt = "float32"
    dw = "depthwise" in target
    c, k, g = (8, 16, 8) if dw else (6, 10, 2)
    stride = 2 if target.endswith("-s2") else 1
    xs, ws = _act(layout, 2, c, (13, 14)), _wt(layout, k, c // g, (3, 3))
    opts = dict(padding=1, stride=stride, groups=g, layout=layout)
    ys = cc.output_shape(xs, ws, **opts)
    if target.startswith("separable"):
        kp = 12
        shp = dict(x=xs, w_dw=_wt(layout, c, 1, (3, 3)), w_pw=_wt(layout, kp, c, (1, 1)),
                   b_dw=(c,), b_pw=(kp,))
        dev = {n: cupy.asarray(uniform(rng, s, dt)) for n, s in shp.items()}
        method = target.split("-")[1]

        def call(out):
            return cc.separable_conv(dev["x"], dev["w_dw"], dev["w_pw"], dev["b_dw"], dev["b_pw"],
                                     padding=1, activation="relu", layout=layout, method=method,
                                     out=out)

        def ref(h):
            t = np.maximum(reference.conv(h["x"], h["w_dw"], h["b_dw"], padding=1, groups=c,
                                          layout=layout), 0)
            return reference.conv(t, h["w_pw"], h["b_pw"], layout=layout)

        return dev, ["x"], call, ref, _act(layout, 2, kp, ys[1:-1] if layout == "NHWC" else ys[2:])
    if target.startswith("conv"):
        method = target.split("-")[1]
        dev = {n: cupy.asarray(uniform(rng, s, dt)) for n, s in (("x", xs), ("w", ws), ("b", (k,)))}
        return (dev, ["x"], lambda out: cc.conv(dev["x"], dev["w"], dev["b"], method=method,
                                                out=out, **opts),
                lambda h: reference.conv(h["x"], h["w"], h["b"], **opts), ys)
    method = "depthwise" if dw else "auto"
    if target.startswith("dgrad"):
        dev = {n: cupy.asarray(uniform(rng, s, dt)) for n, s in (("dy", ys), ("w", ws))}
        return (dev, ["dy"], lambda out: cc.conv_backward_data(dev["dy"], dev["w"], xs,
                                                               method=method, out=out, **opts),
                lambda h: reference.conv_backward_data(h["dy"], h["w"], xs, **opts), xs)
    dev = {n: cupy.asarray(uniform(rng, s, dt)) for n, s in (("x", xs), ("dy", ys))}
    return (dev, ["x", "dy"], lambda out: cc.conv_backward_weight(dev["x"], dev["dy"], ws,
                                                                  method=method, out=out, **opts),
            lambda h: reference.conv_backward_weight(h["x"], h["dy"], ws, **opts), ws)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("target", GRAPH_TARGETS)
def test_cuda_graph_capture_replays_with_new_data(target, layout):
    import cupy

    rng = rng_for("graph", target, layout)
    dev, changing, call, ref, out_shape = _graph_problem(target, layout, rng)
    out = cupy.empty(out_shape, cupy.float32)
    cupy.cuda.Device().synchronize()  # the inputs were written on the null stream
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        for _ in range(2):                       # warm up: same arrays, same alignment
            assert call(out) is out
        stream.synchronize()
        stream.begin_capture()
        try:
            call(out)
        finally:
            graph = stream.end_capture()
    stream.synchronize()
    for round_ in range(2):                      # new contents, replay, compare
        for name in changing:
            dev[name][...] = cupy.asarray(uniform(rng, dev[name].shape, "float32"))
        poison(out)
        cupy.cuda.Device().synchronize()
        graph.launch(stream)
        stream.synchronize()
        host = {n: a.get() for n, a in dev.items()}
        err = rel_error(out, ref(host))
        assert err <= 1e-5, f"{target} {layout}: replay {round_} error {err:.3e}"


# ------------------------------------------------------------------- huge strides: no hang
_HANG_SCRIPT = textwrap.dedent(r"""
    import json, sys, time
    import numpy as np
    import cupy, cupyconv as cc
    from cupyconv import reference
    case = json.loads(sys.argv[1])
    layout, nsp, s, op = case["layout"], case["ndim"], case["stride"], case["op"]
    k = case["kernel"]
    def act(c, sp): return (1, *sp, c) if layout == "NHWC" else (1, c, *sp)
    rng = np.random.default_rng(0)
    w = rng.uniform(-1, 1, size=act(1, (k,) * nsp)).astype(np.float32)   # (1, *k, 1) or (1, 1, *k)
    t0 = time.time()
    try:
        if op == "backward_data":
            xs = act(1, (5,) * nsp)
            dy = rng.uniform(-1, 1, size=act(1, (1,) * nsp)).astype(np.float32)
            opts = dict(stride=s, padding=k // 2, layout=layout)
            got = cc.conv_backward_data(cupy.asarray(dy), cupy.asarray(w), xs, **opts)
            ref = reference.conv_backward_data(dy, w, xs, **opts)
        else:
            x = rng.uniform(-1, 1, size=act(1, (1,) * nsp)).astype(np.float32)
            opts = dict(stride=s, padding=k // 2, output_padding=4, layout=layout)
            got = cc.conv_transpose(cupy.asarray(x), cupy.asarray(w), **opts)
            ref = reference.conv_transpose(x, w, **opts)
        got = got.get()
        ok = got.shape == ref.shape and np.allclose(got, ref, rtol=1e-5, atol=1e-6)
        print(json.dumps(dict(kind="result", ok=bool(ok), seconds=time.time() - t0,
                              shape=list(got.shape), nonzero=int(np.count_nonzero(got)))))
    except ValueError as exc:
        print(json.dumps(dict(kind="ValueError", message=str(exc), seconds=time.time() - t0)))
""")


@pytest.mark.parametrize("case", [
    dict(op="backward_data", ndim=2, stride=10 ** 6, kernel=1, layout="NCHW"),
    dict(op="backward_data", ndim=2, stride=10 ** 6, kernel=3, layout="NHWC"),
    dict(op="backward_data", ndim=3, stride=10 ** 6, kernel=1, layout="NCHW"),
    dict(op="backward_data", ndim=2, stride=2 ** 31 - 1, kernel=1, layout="NCHW"),
    dict(op="backward_data", ndim=2, stride=2 ** 31, kernel=1, layout="NCHW"),
    dict(op="transpose", ndim=2, stride=10 ** 6, kernel=1, layout="NCHW"),
    dict(op="transpose", ndim=3, stride=10 ** 6, kernel=3, layout="NHWC"),
    dict(op="transpose", ndim=2, stride=2 ** 31, kernel=1, layout="NHWC"),
], ids=lambda c: f"{c['op']}-{c['ndim']}d-s{c['stride']}-k{c['kernel']}-{c['layout']}")
def test_huge_stride_returns_promptly(case):
    """stride**ndim phases must not be looped over: a result (or a ValueError) within seconds.
    Run in a subprocess so that a hang fails the test instead of the suite."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(cc.__file__)))]
        + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    try:
        proc = subprocess.run([sys.executable, "-c", _HANG_SCRIPT, json.dumps(case)], env=env,
                              capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case}: no result after 240 s (the stride phases are looped over)")
    assert proc.returncode == 0, f"{case}: exit {proc.returncode}\n{proc.stderr[-3000:]}"
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    # the call itself (kernel compiles from CuPy's disk cache or NVRTC included)
    assert res["seconds"] < 60, f"{case}: took {res['seconds']:.1f} s"
    if res["kind"] == "ValueError":
        assert "stride" in res["message"], f"{case}: ValueError does not name stride: {res}"
        return
    assert res["ok"], f"{case}: wrong result {res}"
    if case["stride"] >= 2 ** 31:
        pytest.fail(f"{case}: stride >= 2**31 must raise ValueError naming stride, got {res}")


# ------------------------------------------------------------- huge sizes: ValueError
def _huge_size_cases():
    import cupy

    f32 = cupy.float32

    def t(*shape):
        return cupy.ones(shape, f32)

    big = 2 ** 31
    return {
        "conv-padding": (lambda: cc.conv(t(1, 1, 4, 4), t(1, 1, 1, 1), padding=big), "padding"),
        "conv-stride": (lambda: cc.conv(t(1, 1, 4, 4), t(1, 1, 1, 1), stride=big), "stride"),
        "conv-pairs": (lambda: cc.conv(t(1, 1, 4, 4), t(1, 1, 1, 1), padding=[(0, big), (0, 0)]),
                       "padding"),
        "conv-1e14-outputs": (lambda: cc.conv(t(1, 1, 1, 1), t(1, 1, 1, 1), padding=5 * 10 ** 6),
                              "padding|output|size|elements"),
        "conv-1e13-outputs-3d": (lambda: cc.conv(t(1, 1, 1, 1, 1), t(1, 1, 1, 1, 1),
                                                 padding=20000),
                                 "padding|output|size|elements"),
        "bwd_data-stride": (lambda: cc.conv_backward_data(t(1, 1, 1, 1), t(1, 1, 1, 1),
                                                          (1, 1, 5, 5), stride=big), "stride"),
        "bwd_data-padding": (lambda: cc.conv_backward_data(t(1, 1, 1, 1), t(1, 1, 1, 1),
                                                           (1, 1, 5, 5), padding=big), "padding"),
        "bwd_data-1e14-input": (lambda: cc.conv_backward_data(
            t(1, 1, 1, 1), t(1, 1, 1, 1), (1, 1, 10 ** 7, 10 ** 7), stride=10 ** 7),
            "input|output|size|elements"),
        "bwd_weight-stride": (lambda: cc.conv_backward_weight(t(1, 1, 5, 5), t(1, 1, 1, 1),
                                                              (1, 1, 1, 1), stride=big), "stride"),
        "bwd_weight-padding": (lambda: cc.conv_backward_weight(t(1, 1, 5, 5), t(1, 1, 1, 1),
                                                               (1, 1, 1, 1), padding=big),
                               "padding"),
        "bwd_weight-1e13-weight": (lambda: cc.conv_backward_weight(
            t(1, 1, 1, 1), t(1, 1, 1, 1), (1, 1, 4 * 10 ** 6 + 1, 4 * 10 ** 6 + 1),
            padding=2 * 10 ** 6), "weight_shape|padding|size|elements"),
        "transpose-stride": (lambda: cc.conv_transpose(t(1, 1, 2, 2), t(1, 1, 1, 1), stride=big),
                             "stride"),
        "transpose-padding": (lambda: cc.conv_transpose(t(1, 1, 2, 2), t(1, 1, 1, 1),
                                                        padding=big), "padding"),
        "transpose-1e14-outputs": (lambda: cc.conv_transpose(t(1, 1, 2, 2), t(1, 1, 1, 1),
                                                             stride=10 ** 7),
                                   "stride|output|size|elements"),
        "im2col-padding": (lambda: cc.im2col(t(1, 1, 4, 4), 1, padding=big), "padding"),
        "im2col-stride": (lambda: cc.im2col(t(1, 1, 4, 4), 1, stride=big), "stride"),
        "im2col-1e13-columns": (lambda: cc.im2col(t(1, 1, 1, 1), 1, padding=3 * 10 ** 6),
                                "padding|output|size|elements"),
    }


HUGE_SIZE_NAMES = ["conv-padding", "conv-stride", "conv-pairs", "conv-1e14-outputs",
                   "conv-1e13-outputs-3d", "bwd_data-stride", "bwd_data-padding",
                   "bwd_data-1e14-input", "bwd_weight-stride", "bwd_weight-padding",
                   "bwd_weight-1e13-weight", "transpose-stride", "transpose-padding",
                   "transpose-1e14-outputs", "im2col-padding", "im2col-stride",
                   "im2col-1e13-columns"]


def _within(seconds, fn):
    """``fn()``'s exception (or None) if it finishes within ``seconds``; fails the test if not
    (the call is left running in a daemon thread)."""
    box = {}

    def target():
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["exc"] = exc

    th = threading.Thread(target=target, daemon=True)
    th.start()
    th.join(seconds)
    if th.is_alive():
        pytest.fail(f"no answer within {seconds} s")
    return box.get("exc")


@pytest.mark.parametrize("name", HUGE_SIZE_NAMES)
def test_huge_sizes_raise_value_error(name):
    import re

    fn, names = _huge_size_cases()[name]
    exc = _within(120, fn)
    assert exc is not None, f"{name}: no error raised"
    assert isinstance(exc, ValueError), f"{name}: {type(exc).__name__}: {exc}"
    assert re.search(names, str(exc)), f"{name}: ValueError does not name ({names}): {exc}"


# ------------------------------------------------------------------------- out aliasing
def _alias_cases():
    """name -> (call(out), out aliasing an input, inputs)."""
    import cupy

    def r(*shape, seed=0):
        return cupy.asarray(uniform(np.random.default_rng(seed + len(shape)), shape, "float32"))

    def overlap(shape, seed):
        """An array of ``shape`` and a C-contiguous array of the same shape overlapping its second
        half (one buffer)."""
        size = int(np.prod(shape))
        buf = r(2 * size, seed=seed)
        return buf[:size].reshape(shape), buf[size // 2:size // 2 + size].reshape(shape)

    cases = {}
    x, w = r(2, 8, 6, 6), r(8, 8, 1, 1, seed=1)
    for method in ("auto", "implicit_gemm", "im2col_gemm", "direct"):
        cases[f"conv-1x1-out=x-{method}"] = (
            lambda out, m=method, x=x, w=w: cc.conv(x, w, method=m, out=out), x, [x, w])
    x2, w2 = r(2, 2, 3, 3, seed=2), r(2, 2, 3, 3, seed=3)
    cases["conv-out=w"] = (lambda out: cc.conv(x2, w2, padding=1, out=out), w2, [x2, w2])
    xo, yo = overlap((2, 8, 6, 6), 4)
    cases["conv-out-overlaps-x"] = (lambda out: cc.conv(xo, w, out=out), yo, [xo, w])
    xd, wd = r(2, 6, 6, 4, seed=5), r(4, 3, 3, 1, seed=6)
    for method in ("depthwise", "direct"):
        cases[f"conv-depthwise-NHWC-out=x-{method}"] = (
            lambda out, m=method: cc.conv(xd, wd, padding=1, groups=4, layout="NHWC", method=m,
                                          out=out), xd, [xd, wd])
    dy, wb = r(2, 4, 6, 6, seed=7), r(4, 4, 3, 3, seed=8)
    cases["bwd_data-out=dy"] = (lambda out: cc.conv_backward_data(dy, wb, dy.shape, padding=1,
                                                                  out=out), dy, [dy, wb])
    dy4, w4 = r(4, 4, 3, 3, seed=9), r(4, 4, 3, 3, seed=10)
    cases["bwd_data-out=w"] = (lambda out: cc.conv_backward_data(dy4, w4, (4, 4, 3, 3), padding=1,
                                                                 out=out), w4, [dy4, w4])
    dyo, dxo = overlap((2, 4, 6, 6), 11)
    cases["bwd_data-out-overlaps-dy"] = (
        lambda out: cc.conv_backward_data(dyo, wb, dyo.shape, padding=1, out=out), dxo, [dyo, wb])
    dyd, wdd = r(2, 4, 6, 6, seed=12), r(4, 1, 3, 3, seed=13)
    cases["bwd_data-depthwise-out=dy"] = (
        lambda out: cc.conv_backward_data(dyd, wdd, dyd.shape, padding=1, groups=4,
                                          method="depthwise", out=out), dyd, [dyd, wdd])
    x4, dyw = r(4, 4, 3, 3, seed=14), r(4, 4, 3, 3, seed=15)
    cases["bwd_weight-out=x"] = (lambda out: cc.conv_backward_weight(x4, dyw, (4, 4, 3, 3),
                                                                     padding=1, out=out),
                                 x4, [x4, dyw])
    cases["bwd_weight-out=dy"] = (lambda out: cc.conv_backward_weight(x4, dyw, (4, 4, 3, 3),
                                                                      padding=1, out=out),
                                  dyw, [x4, dyw])
    xt, wt = r(2, 4, 6, 6, seed=16), r(4, 4, 3, 3, seed=17)
    cases["transpose-out=x"] = (lambda out: cc.conv_transpose(xt, wt, padding=1, out=out), xt,
                                [xt, wt])
    xto, yto = overlap((2, 4, 6, 6), 18)
    cases["transpose-out-overlaps-x"] = (lambda out: cc.conv_transpose(xto, wt, padding=1,
                                                                       out=out), yto, [xto, wt])
    xs_, wdw, wpw = r(2, 8, 6, 6, seed=19), r(8, 1, 3, 3, seed=20), r(8, 8, 1, 1, seed=21)
    for method in ("fused", "unfused"):
        cases[f"separable-out=x-{method}"] = (
            lambda out, m=method: cc.separable_conv(xs_, wdw, wpw, padding=1, method=m, out=out),
            xs_, [xs_, wdw, wpw])
    xso, yso = overlap((2, 8, 6, 6), 22)
    cases["separable-out-overlaps-x"] = (
        lambda out: cc.separable_conv(xso, wdw, wpw, padding=1, out=out), yso, [xso, wdw, wpw])
    return cases


ALIAS_NAMES = (["conv-1x1-out=x-" + m for m in ("auto", "implicit_gemm", "im2col_gemm", "direct")]
               + ["conv-out=w", "conv-out-overlaps-x", "conv-depthwise-NHWC-out=x-depthwise",
                  "conv-depthwise-NHWC-out=x-direct", "bwd_data-out=dy", "bwd_data-out=w",
                  "bwd_data-out-overlaps-dy", "bwd_data-depthwise-out=dy", "bwd_weight-out=x",
                  "bwd_weight-out=dy", "transpose-out=x", "transpose-out-overlaps-x",
                  "separable-out=x-fused", "separable-out=x-unfused", "separable-out-overlaps-x"])


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "after_a_valid_call"])
@pytest.mark.parametrize("name", ALIAS_NAMES)
def test_out_aliasing_an_input_is_refused(name, warm):
    """``out`` sharing memory with an input raises ValueError before anything is launched, and
    leaves every input (so ``out``) untouched; also after a valid call of the same problem with
    a separate ``out`` of the same shape, strides and alignment (the per-call fast path)."""
    import cupy

    call, out, inputs = _alias_cases()[name]
    if warm:
        fresh = cupy.empty(out.shape, out.dtype)
        if out.data.ptr % 16:                      # same alignment as the aliasing out
            fresh = cupy.empty(out.size + 4, out.dtype)[(out.data.ptr % 16) // out.itemsize:]
            fresh = fresh[:out.size].reshape(out.shape)
        assert call(fresh) is fresh
    cupy.cuda.Device().synchronize()
    before = [a.get() for a in inputs]
    out_before = out.get()
    with pytest.raises(ValueError, match="out"):
        call(out)
    cupy.cuda.Device().synchronize()
    assert np.array_equal(out.get(), out_before), f"{name}: out was written"
    for a, b in zip(inputs, before):
        assert np.array_equal(a.get(), b), f"{name}: an input was modified"


# ------------------------------------------------------------------------- new host threads
def _in_new_thread(fn):
    """``fn()`` in a new host thread (no CUDA context current there yet); its result, or the
    exception it raised."""
    box = {}

    def target():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["exc"] = exc

    th = threading.Thread(target=target)
    th.start()
    th.join()
    if "exc" in box:
        raise box["exc"]
    return box["result"]


def _thread_problems(rng):
    """name -> (call(), float64 reference): one of each family (GEMM paths, depthwise, fused
    separable, ndimage, signal)."""
    import cupy
    import scipy.ndimage as sn
    import scipy.signal as ss

    problems = {name: _stream_problem(name, "NCHW", "float32", 2, rng)
                for name in ("implicit-fwd", "implicit-dgrad-s2", "dw-wgrad", "separable-fused")}
    img = uniform(rng, (37, 41), "float32")
    dimg = cupy.asarray(img)
    problems["ndimage-gaussian"] = (lambda: cc.ndimage.gaussian_filter(dimg, 1.5),
                                    sn.gaussian_filter(img.astype(np.float64), 1.5))
    ker = uniform(rng, (5, 4), "float32")
    dker = cupy.asarray(ker)
    problems["signal-correlate"] = (lambda: cc.signal.correlate(dimg, dker, method="direct"),
                                    ss.correlate(img.astype(np.float64), ker.astype(np.float64),
                                                 method="direct"))
    return problems


THREAD_PROBLEMS = ("implicit-fwd", "implicit-dgrad-s2", "dw-wgrad", "separable-fused",
                   "ndimage-gaussian", "signal-correlate")


@pytest.mark.parametrize("name", THREAD_PROBLEMS)
def test_calls_from_new_host_threads(name):
    """A host thread's first GPU work is a cupyconv call on arrays made in another thread, its
    output served from CuPy's pool (as in dask's threaded scheduler): first with the kernels to
    load (caches cleared), then a repeat (the prepared replay) in another new thread."""
    import cupy

    call, ref = _thread_problems(rng_for("threads", name))[name]
    first = call()                       # compiles (CuPy's disk cache), fills the pool
    del first
    cupy.cuda.Device().synchronize()
    cc.clear_caches()                    # the new thread loads the modules itself
    results = [_in_new_thread(call) for _ in range(3)]
    cupy.cuda.Device().synchronize()
    tol = tolerance("float32", ref)
    for i, r in enumerate(results):
        err = rel_error(r, ref)
        assert err <= tol, f"{name}: call {i} in a new thread: error {err:.3e} (tol {tol:.1e})"
