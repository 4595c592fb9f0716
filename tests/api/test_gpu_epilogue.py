"""The fused inference epilogue of ``conv`` on the GPU: ``act(conv + bias + z)`` against the
float64 reference, on every forward algorithm (the GEMM epilogue with and without split-K, the
direct kernel, the depthwise kernels' pass after them), into NaN-poisoned outputs; views as z;
prepared calls replaying with a new z; argument errors before any compile."""

import numpy as np
import pytest

import cupyconv as cc
from cupyconv import jit, reference
from cupyconv._core.kernels import gemm_tiles
from cupyconv._core.precision import gemm_math
from cupyconv._dispatch import callcache
from cupyconv._gemm.launch import forced_plan
from cupyconv._gemm.plans import GemmPlan

from gpu_cases import rng_for
from trust_helpers import poison, rel_error, tolerance, uniform

pytestmark = pytest.mark.gpu

ACTS = (None, "relu", "relu6", "silu", "gelu", "gelu_tanh")
DTYPES = ("float16", "float32", "float64")
# (bias, z) combinations
EPILOGUES = ((False, False), (True, False), (False, True), (True, True))


def _operands(seed, xs, ws, opts, dtype, layout, bias, z):
    """Host operands, with the weights scaled by 1/sqrt(fan-in) so that outputs are O(1) and
    every activation's curved part is exercised (not only its saturated ends)."""
    rng = rng_for(seed, xs, ws, dtype, layout, bias, z)
    if layout == "NHWC":
        xs, ws = (xs[0], *xs[2:], xs[1]), (ws[0], *ws[2:], ws[1])
    x = uniform(rng, xs, dtype)
    fan_in = int(np.prod(ws[1:]))
    w = (uniform(rng, ws, "float64") * (2.0 / np.sqrt(fan_in))).astype(dtype)
    b = uniform(rng, (ws[0],), dtype) if bias else None
    shape = reference.conv(x, w, layout=layout, **opts).shape
    zz = (uniform(rng, shape, "float64") * 2).astype(dtype) if z else None
    return x, w, b, zz


def _check(got, x, w, b, z, act, opts, layout, dtype, what=""):
    ref = reference.conv(x, w, b, layout=layout, activation=act, z=z, **opts)
    err = rel_error(got, ref)
    assert err <= tolerance(dtype, ref), f"{what}: relative error {err:.2e}"


def _dev(*arrays):
    import cupy

    return [None if a is None else cupy.asarray(a) for a in arrays]


def _poisoned(shape, dtype):
    import cupy

    return poison(cupy.empty(shape, dtype=dtype))


# A 3x3 conv with a 7x7 output and 512 input channels (M*N small, K = 4608: split-K when the
# planner may choose), and a small one; both are run with the plan forced to one part and to
# several, and through the planner's own choice (which is also the prepared call's path).
GEMM_SHAPES = {
    "7x7x512": ((1, 512, 9, 9), (64, 512, 3, 3), dict(padding=0)),
    "small": ((2, 8, 11, 10), (12, 8, 3, 3), dict(padding=1)),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("bias,z", EPILOGUES)
@pytest.mark.parametrize("act", ACTS)
def test_implicit_gemm_epilogue(act, bias, z, layout, dtype):
    import cupy

    tile = gemm_tiles(dtype, gemm_math(dtype, "exact", cupy.cuda.Device().id))[0]
    for name, (xs, ws, opts) in GEMM_SHAPES.items():
        x, w, b, zz = _operands(name, xs, ws, opts, dtype, layout, bias, z)
        dx, dw, db, dz = _dev(x, w, b, zz)
        shape = reference.conv(x, w, layout=layout, **opts).shape
        for splits in (None, 1, 3):
            out = _poisoned(shape, dtype)
            if splits is None:
                cc.conv(dx, dw, db, layout=layout, method="implicit_gemm", activation=act, z=dz,
                        out=out, **opts)
            else:
                with forced_plan(GemmPlan(tile, splits, 0.0)):
                    cc.conv(dx, dw, db, layout=layout, method="implicit_gemm", activation=act,
                            z=dz, out=out, **opts)
            cupy.cuda.runtime.deviceSynchronize()
            _check(out, x, w, b, zz, act, opts, layout, dtype, f"{name} splits={splits}")


# One shape per other algorithm (and the 1x1 dense GEMM path of implicit_gemm), bias and z on.
OTHER_CASES = {
    "direct": ((2, 6, 9, 8), (10, 3, 3, 3), dict(padding=1, groups=2, stride=2), "direct"),
    "im2col": ((2, 8, 10, 9), (12, 8, 3, 3), dict(padding=1), "im2col_gemm"),
    "pointwise": ((2, 16, 33, 33), (24, 16, 1, 1), {}, "implicit_gemm"),
    "depthwise": ((2, 16, 12, 12), (16, 1, 3, 3), dict(padding=1, groups=16), "depthwise"),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout,act", [("NCHW", "gelu"), ("NHWC", "relu6")])
@pytest.mark.parametrize("case", sorted(OTHER_CASES))
def test_other_algorithms_epilogue(case, layout, act, dtype):
    xs, ws, opts, method = OTHER_CASES[case]
    x, w, b, zz = _operands(case, xs, ws, opts, dtype, layout, True, True)
    dx, dw, db, dz = _dev(x, w, b, zz)
    out = _poisoned(reference.conv(x, w, layout=layout, **opts).shape, dtype)
    y = cc.conv(dx, dw, db, layout=layout, method=method, activation=act, z=dz, out=out, **opts)
    assert y is out
    _check(out, x, w, b, zz, act, opts, layout, dtype, case)


def _z_views(shape, dtype, layout):
    """Non-contiguous z of ``shape``: a slice of a wider array, and (NHWC) a channels-first
    buffer seen through a transpose, or (NCHW) a channels-last one."""
    import cupy

    n, *rest = shape
    wide = cupy.asarray(uniform(rng_for("wide", shape), (n, *rest[:-1], rest[-1] + 3), dtype))
    views = [wide[..., 1:1 + rest[-1]]]
    if layout == "NHWC":  # (N, H, W, C) from a (N, C, H, W) buffer
        buf = cupy.asarray(uniform(rng_for("cf", shape), (n, rest[-1], *rest[:-1]), dtype))
        views.append(buf.transpose(0, *range(2, len(shape)), 1))
    else:  # (N, C, H, W) from a (N, H, W, C) buffer
        buf = cupy.asarray(uniform(rng_for("cl", shape), (n, *rest[1:], rest[0]), dtype))
        views.append(buf.transpose(0, len(shape) - 1, *range(1, len(shape) - 1)))
    return views


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("method", ["implicit_gemm", "direct", "depthwise"])
def test_z_views(method, layout):
    dtype = "float32"
    xs, ws, opts = ((2, 16, 12, 12), (16, 1, 3, 3), dict(padding=1, groups=16))
    if method != "depthwise":
        ws = (24, 16, 3, 3)
        opts = dict(padding=1)
    x, w, b, _ = _operands("views", xs, ws, opts, dtype, layout, True, False)
    dx, dw, db = _dev(x, w, b)
    shape = reference.conv(x, w, layout=layout, **opts).shape
    for z in _z_views(shape, dtype, layout):
        assert not z.flags.c_contiguous
        for _ in range(2):  # the full path, then the prepared call
            y = cc.conv(dx, dw, db, layout=layout, method=method, activation="silu", z=z, **opts)
            _check(y, x, w, b, z.get(), "silu", opts, layout, dtype, "view")


@pytest.mark.parametrize("name,method", [("7x7x512", "implicit_gemm"), ("small", "implicit_gemm"),
                                         ("small", "direct")])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_prepared_call_reads_the_new_z(name, method, layout):
    """The second call replays the recorded program with its own z, not the first call's."""
    import cupy

    dtype = "float32"
    xs, ws, opts = GEMM_SHAPES[name]
    callcache.clear()
    x, w, b, z1 = _operands(name, xs, ws, opts, dtype, layout, True, True)
    dx, dw, db, dz1 = _dev(x, w, b, z1)
    y1 = _poisoned(reference.conv(x, w, layout=layout, **opts).shape, dtype)
    cc.conv(dx, dw, db, layout=layout, method=method, activation="gelu", z=dz1, out=y1, **opts)
    _check(y1, x, w, b, z1, "gelu", opts, layout, dtype, "first call")
    calls = list(callcache._calls.values())
    assert len(calls) == 1 and calls[0].recorded
    z2 = -2.0 * z1 + 0.5
    dz2 = cupy.asarray(z2)
    out = _poisoned(y1.shape, dtype)
    cc.conv(dx, dw, db, layout=layout, method=method, activation="gelu", z=dz2, out=out, **opts)
    assert len(callcache._calls) == 1  # the warm call took the prepared program
    _check(out, x, w, b, z2, "gelu", opts, layout, dtype, "second call")
    # another activation, or no z, is another program
    cc.conv(dx, dw, db, layout=layout, method=method, activation="relu", z=dz2, **opts)
    cc.conv(dx, dw, db, layout=layout, method=method, activation="gelu", **opts)
    assert len(callcache._calls) == 3


@pytest.mark.parametrize("name", sorted(GEMM_SHAPES))
def test_epilogue_leaves_the_accumulation_alone(name):
    """float32: the fused z and relu are, bit for bit, the plain convolution's output (same plan)
    plus z and clamped: the epilogue adds in the stored type's precision and changes nothing
    before it."""
    import cupy

    xs, ws, opts = GEMM_SHAPES[name]
    x, w, b, z = _operands("bits", xs, ws, opts, "float32", "NCHW", True, True)
    dx, dw, db, dz = _dev(x, w, b, z)
    plain = cc.conv(dx, dw, db, **opts)
    assert bool(cupy.array_equal(cc.conv(dx, dw, db, z=dz, **opts), plain + dz))
    assert bool(cupy.array_equal(cc.conv(dx, dw, db, activation="relu", **opts),
                                 cupy.maximum(plain, 0)))


class TestErrorsBeforeCompile:
    @pytest.fixture
    def arrays(self):
        import cupy

        rng = np.random.default_rng(1)
        x = cupy.asarray(rng.standard_normal((2, 4, 9, 9)).astype(np.float32))
        w = cupy.asarray(rng.standard_normal((6, 2, 3, 3)).astype(np.float32))
        return x, w

    @pytest.mark.parametrize("kwargs,exc,match", [
        (dict(activation="tanh"), ValueError, "activation must be one of"),
        (dict(activation=0), ValueError, "activation must be one of"),
        (dict(z="zeros"), TypeError, "z must be a cupy.ndarray"),
        (dict(z=np.zeros((2, 6, 7, 7), np.float32)), TypeError,
         r"z must be a cupy.ndarray.*cupy.asarray\(z\)"),
        (dict(z=("shape", (2, 6, 9, 9), "float32")), ValueError,
         r"z must have the output's shape \(2, 6, 7, 7\) \(layout NCHW\)"),
        (dict(z=("shape", (2, 7, 7, 6), "float32")), ValueError, "z must have the output's shape"),
        (dict(z=("shape", (2, 6, 7, 7), "float16")), TypeError, "z has dtype float16"),
    ])
    def test_errors_come_before_any_compile(self, arrays, kwargs, exc, match):
        import cupy

        x, w = arrays
        if isinstance(kwargs.get("z"), tuple):
            _, shape, dtype = kwargs["z"]
            kwargs = dict(z=cupy.zeros(shape, dtype))
        out = cupy.full((2, 6, 7, 7), 7.0, cupy.float32)
        jit.clear_cache()
        with pytest.raises(exc, match=match):
            cc.conv(x, w, groups=2, out=out, **kwargs)
        assert jit.cache_info()["misses"] == 0
        assert bool((out == 7.0).all())

    def test_out_must_not_overlap_z(self, arrays):
        import cupy

        x, w = arrays
        y = cupy.zeros((2, 6, 7, 7), cupy.float32)
        jit.clear_cache()
        with pytest.raises(ValueError, match="out overlaps z"):
            cc.conv(x, w, groups=2, z=y, out=y)
        assert jit.cache_info()["misses"] == 0
