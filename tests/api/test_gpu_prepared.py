"""Prepared calls (cupyconv._core.program, cupyconv._dispatch.callcache): a warm call replays the
recorded launches of the first call with new arrays.  Each case calls an operation twice with
fresh inputs of the same shapes (and views of the same strides), checks both results against the
float64 reference, and checks that the warm call took a recorded program (not the full path)
wherever the operation's device work is recordable.  The suite also runs with
CUPYCONV_VERIFY_PREPARED=1 (conftest), so every program is replayed once into poisoned outputs."""

import threading

import numpy as np
import pytest

import cupyconv as cc
from cupyconv import reference
from cupyconv._dispatch import callcache

from gpu_cases import rng_for
from trust_helpers import rel_error, tolerance, uniform

pytestmark = pytest.mark.gpu


def _recorded_calls() -> list[bool]:
    return [c.recorded for c in callcache._calls.values() if isinstance(c, callcache.PreparedCall)]


def _twice(make_inputs, op, ref_op, dtype, *, expect_recorded=True):
    """Call ``op`` on two fresh input sets; compare both with ``ref_op`` on host copies."""
    import cupy

    callcache.clear()
    for round_ in range(2):
        host = make_inputs(round_)
        dev = [None if h is None else (h if isinstance(h, cupy.ndarray) else cupy.asarray(h))
               for h in host]
        got = op(*dev)
        ref = ref_op(*[None if d is None else cupy.asnumpy(d).astype(np.float64) for d in dev])
        err = rel_error(got, ref)
        assert err <= tolerance(dtype, ref), f"round {round_}: relative error {err:.2e}"
        if round_ == 0:
            assert len(callcache._calls) == 1
            recorded = _recorded_calls()
            assert recorded == [expect_recorded], recorded


def _case(seed, *shapes, dtype="float32"):
    rng = rng_for(seed)
    return lambda round_: [None if s is None else uniform(rng, s, dtype) for s in shapes]


CONV_CASES = {
    # name: (x shape, w shape, options)
    "implicit_3x3_nchw": ((2, 8, 11, 13), (16, 8, 3, 3), dict(padding=1)),
    "implicit_3x3_nhwc": ((2, 11, 13, 8), (16, 3, 3, 8), dict(padding=1, layout="NHWC")),
    "strided_dilated": ((1, 6, 17, 15), (10, 6, 3, 5), dict(stride=2, dilation=(2, 1), padding=2)),
    "pointwise_nchw": ((2, 16, 40, 40), (24, 16, 1, 1), {}),
    "pointwise_nhwc": ((2, 9, 9, 16), (24, 1, 1, 16), dict(layout="NHWC")),
    "grouped": ((2, 12, 9, 9), (12, 4, 3, 3), dict(groups=3, padding=1)),
    "depthwise_nchw": ((2, 16, 20, 20), (16, 1, 3, 3), dict(groups=16, padding=1)),
    "depthwise_nhwc": ((2, 20, 20, 16), (16, 3, 3, 1), dict(groups=16, padding=1, layout="NHWC")),
    "conv1d": ((3, 5, 50), (7, 5, 4), dict(padding=((1, 2),))),
    "conv3d": ((1, 4, 6, 7, 8), (6, 4, 3, 3, 3), dict(padding=1)),
}


@pytest.mark.parametrize("method", ["auto", "implicit_gemm", "im2col_gemm", "direct"])
@pytest.mark.parametrize("name", sorted(CONV_CASES))
@pytest.mark.parametrize("bias", [False, True])
def test_conv_warm_call_replays(name, method, bias):
    from cupyconv._dispatch.forward import FORWARD

    xs, ws, opts = CONV_CASES[name]
    k = ws[0]
    geom = cc.ConvGeometry.from_shapes(xs, ws, **opts)

    def op(x, w, b):
        return cc.conv(x, w, b, method=method, **opts)

    def ref(x, w, b):
        return reference.conv(x, w, b, **opts)

    make = _case(hash(name) % 1000, xs, ws, (k,) if bias else None)
    if method != "auto" and not FORWARD[method].applicable(geom):
        import cupy

        # a named method that cannot run the problem is refused before any launch
        with pytest.raises(ValueError, match="cannot run this problem"):
            op(*[None if h is None else cupy.asarray(h) for h in make(0)])
        return
    _twice(make, op, ref, "float32")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_conv_warm_call_other_dtypes(dtype):
    _twice(_case(3, (2, 8, 12, 12), (8, 8, 3, 3), (8,), dtype=dtype),
           lambda x, w, b: cc.conv(x, w, b, padding=1),
           lambda x, w, b: reference.conv(x, w, b, padding=1), dtype)


def test_strided_bias_and_reversed_views_replay():
    """Views with negative strides and a strided bias: the warm call's new views are placed by
    byte offset from their operand, like the first call's."""
    import cupy

    rng = rng_for(11)

    def make(round_):
        x = cupy.asarray(uniform(rng, (2, 6, 10, 12)))[:, :, ::-1, ::-1]
        w = cupy.asarray(uniform(rng, (8, 6, 3, 3)))[::-1]
        b = cupy.asarray(uniform(rng, (16,)))[::2]
        return [x, w, b]

    _twice(make, lambda x, w, b: cc.conv(x, w, b, padding=1),
           lambda x, w, b: reference.conv(x, w, b, padding=1), "float32")


@pytest.mark.parametrize("stride,padding", [(1, 1), (2, 1), (3, 0), (2, 0)])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_backward_data_warm_call_replays(stride, padding, layout):
    x_shape = (2, 6, 13, 11) if layout == "NCHW" else (2, 13, 11, 6)
    w_shape = (8, 6, 3, 3) if layout == "NCHW" else (8, 3, 3, 6)
    geom = cc.ConvGeometry.from_shapes(x_shape, w_shape, stride=stride, padding=padding,
                                       layout=layout)
    opts = dict(stride=stride, padding=padding, layout=layout)
    _twice(_case(stride * 10 + padding, geom.output_shape, w_shape),
           lambda dy, w: cc.conv_backward_data(dy, w, x_shape, **opts),
           lambda dy, w: reference.conv_backward_data(dy, w, x_shape, **opts), "float32")


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("groups", [1, 2, 6])
def test_backward_weight_warm_call_replays(layout, groups):
    x_shape = (2, 6, 13, 11) if layout == "NCHW" else (2, 13, 11, 6)
    w_shape = (6, 6 // groups, 3, 3) if layout == "NCHW" else (6, 3, 3, 6 // groups)
    geom = cc.ConvGeometry.from_shapes(x_shape, w_shape, stride=2, padding=1, groups=groups,
                                       layout=layout)
    opts = dict(stride=2, padding=1, groups=groups, layout=layout)
    _twice(_case(groups, x_shape, geom.output_shape),
           lambda x, dy: cc.conv_backward_weight(x, dy, w_shape, **opts),
           lambda x, dy: reference.conv_backward_weight(x, dy, w_shape, **opts), "float32")


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("stride,dilation,groups", [(2, 1, 1), (1, 1, 2), (4, 1, 1), (3, 2, 4)])
def test_conv_transpose_warm_call(bias, stride, dilation, groups):
    # The bias rides in the phases' epilogues (recorded).  Where rows receive no tap (stride 4 >
    # a 3-tap kernel) they are zero-filled and the bias is added by CuPy: not recorded.
    zero_rows = stride > 3 * dilation - (dilation - 1)
    opts = dict(stride=stride, padding=1, output_padding=1 if stride > 1 else 0,
                dilation=dilation, groups=groups)
    _twice(_case(5 + stride, (2, 8, 7, 9), (8, 4, 3, 3), (4 * groups,) if bias else None),
           lambda x, w, b: cc.conv_transpose(x, w, b, **opts),
           lambda x, w, b: reference.conv_transpose(x, w, b, **opts),
           "float32", expect_recorded=not (bias and zero_rows))


def test_conv_transpose_depthwise_bias():
    """Depthwise transposed convolution: the depthwise kernel adds no bias, the caller does."""
    _twice(_case(6, (2, 8, 7, 9), (8, 1, 3, 3), (8,)),
           lambda x, w, b: cc.conv_transpose(x, w, b, stride=2, padding=1, groups=8),
           lambda x, w, b: reference.conv_transpose(x, w, b, stride=2, padding=1, groups=8),
           "float32", expect_recorded=False)


@pytest.mark.parametrize("method,activation,recorded", [
    ("fused", None, True), ("fused", "relu6", True), ("unfused", None, True),
    ("unfused", "relu", False)])
def test_separable_warm_call(method, activation, recorded):
    def ref(x, w_dw, w_pw, b_dw, b_pw):
        mid = reference.conv(x, w_dw, b_dw, padding=1, groups=x.shape[1])
        if activation == "relu":
            mid = np.maximum(mid, 0)
        elif activation == "relu6":
            mid = np.clip(mid, 0, 6)
        return reference.conv(mid, w_pw, b_pw)

    _twice(_case(7, (2, 16, 14, 14), (16, 1, 3, 3), (24, 16, 1, 1), (16,), (24,)),
           lambda x, w_dw, w_pw, b_dw, b_pw: cc.separable_conv(
               x, w_dw, w_pw, b_dw, b_pw, padding=1, activation=activation, method=method),
           ref, "float32", expect_recorded=recorded)


@pytest.mark.parametrize("transpose_a,transpose_b", [(False, False), (True, False), (False, True)])
def test_gemm_warm_call(transpose_a, transpose_b):
    import cupy

    rng = rng_for(9)

    def make(round_):
        a = cupy.asarray(uniform(rng, (70, 50) if transpose_a else (50, 70)))
        b = cupy.asarray(uniform(rng, (30, 70) if transpose_b else (70, 30)))
        return [a.T if transpose_a else a, b.T if transpose_b else b]

    _twice(make, cc.gemm, lambda a, b: a @ b, "float32")


def test_im2col_and_col2im_warm_calls():
    opts = dict(stride=2, padding=1)
    _twice(_case(1, (2, 3, 9, 8)), lambda x: cc.im2col(x, 3, **opts),
           lambda x: reference.im2col(x, 3, **opts), "float32")
    import cupy

    shape = cc.im2col(cupy.zeros((2, 3, 9, 8), "float32"), 3, **opts).shape
    _twice(_case(2, shape), lambda c: cc.col2im(c, (2, 3, 9, 8), 3, **opts),
           lambda c: reference.col2im(c, (2, 3, 9, 8), 3, **opts), "float32")


def test_correlate2d_warm_call():
    from scipy import signal

    _twice(_case(4, (64, 64), (3, 3)), lambda a, b: cc.signal.correlate2d(a, b, mode="same"),
           lambda a, b: signal.correlate2d(a, b, mode="same"), "float32")


def test_a_prepared_call_replays_on_another_stream_and_thread():
    """Prepared on the null stream, replayed on a non-blocking stream from another thread: the
    replay launches on that thread's current stream."""
    import cupy

    rng = rng_for(21)
    xs = [cupy.asarray(uniform(rng, (2, 8, 16, 16))) for _ in range(3)]
    w = cupy.asarray(uniform(rng, (8, 8, 3, 3)))
    cc.conv(xs[0], w, padding=1)
    results = {}

    def worker(i):
        s = cupy.cuda.Stream(non_blocking=True)
        with s:
            results[i] = cc.conv(xs[i], w, padding=1)
        s.synchronize()

    threads = [threading.Thread(target=worker, args=(i,)) for i in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in (1, 2):
        ref = reference.conv(cupy.asnumpy(xs[i]).astype(np.float64),
                             cupy.asnumpy(w).astype(np.float64), padding=1)
        assert rel_error(results[i], ref) <= tolerance("float32", ref)


def test_prepared_calls_survive_a_cleared_module_cache():
    """``cupyconv.jit.clear_cache()`` drops the loaded modules but not the prepared calls: those
    keep their kernels' modules alive, so a warm call still runs (and is right)."""
    import cupy

    rng = rng_for(31)
    x = cupy.asarray(uniform(rng, (2, 8, 12, 12)))
    w = cupy.asarray(uniform(rng, (8, 8, 3, 3)))
    cc.conv(x, w, padding=1)
    cc.jit.clear_cache()
    import gc

    gc.collect()
    x2 = cupy.asarray(uniform(rng, (2, 8, 12, 12)))
    y = cc.conv(x2, w, padding=1)
    ref = reference.conv(cupy.asnumpy(x2).astype(np.float64), cupy.asnumpy(w).astype(np.float64),
                         padding=1)
    assert rel_error(y, ref) <= tolerance("float32", ref)
    assert _recorded_calls() == [True]


def test_clear_caches_forgets_prepared_calls_and_plans():
    import cupy

    x = cupy.ones((1, 4, 8, 8), "float32")
    w = cupy.ones((4, 4, 3, 3), "float32")
    cc.conv(x, w, padding=1)
    assert callcache._calls
    cc.clear_caches()
    assert not callcache._calls
    assert cc.jit.cache_info()["modules"] == []
    y = cc.conv(x, w, padding=1)  # plans and loads again
    assert float(y[0, 0, 3, 3]) == 36.0
