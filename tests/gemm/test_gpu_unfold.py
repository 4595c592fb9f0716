"""Width unfolding (``staging.UNFOLD_W``, ``staging._unfolded``) on the GPU: few-channel forward
and backward-data problems run on the copy of x whose channels are a kernel row's (tap, channel)
columns, against the float64 reference, over strides, dilations, paddings wider than the kernel,
1-3 spatial dims, both layouts, both weight paths, views with offsets and negative strides; the
recorded GEMM must have the unfolded K."""

import math

import numpy as np
import pytest

import cupyconv
from cupyconv import reference
from cupyconv._core.verify import poison, random_array, rel_error, round_tf32, tf32_tolerance, tolerance
from cupyconv._gemm import launch, staging

from gpu_cases import rng_for

pytestmark = pytest.mark.gpu

KINDS = [("float16", "exact"), ("bfloat16", "exact"), ("float32", "tf32")]
# (n, c, k, spatial, kernel, opts)
CASES = [
    (2, 3, 8, (20, 23), (7, 7), dict(stride=2, padding=3)),
    (1, 1, 5, (9, 17), (5, 5), dict(stride=(1, 3), padding=[(2, 2), (4, 1)], dilation=(1, 2))),
    (3, 2, 4, (29,), (9,), dict(stride=2, padding=5)),
    (1, 5, 6, (6, 11), (1, 7), dict(padding=(0, 9))),   # whole output columns in the padding
    (2, 3, 4, (5, 6, 7), (3, 3, 3), dict(padding=1)),
    (1, 3, 7, (8, 9), (3, 4), dict(padding="valid", dilation=(2, 1))),
]


def _id(case):
    n, c, k, sp, ker, opts = case
    return f"c{c}k{k}-{'x'.join(map(str, sp))}-{'x'.join(map(str, ker))}-{sorted(opts.items())}"


def _width(c, ker, dtype):
    chunk = 16 // np.dtype("float32" if dtype == "float32" else "float16").itemsize
    return -(-ker[-1] * c // chunk) * chunk


def _view(a, kind: str):
    """``a`` (CuPy) as the kind of view the test reads: as it is, an offset window of a larger
    array, or a reversed-stride view of a reversed copy (same values)."""
    import cupy

    if kind == "plain":
        return a
    if kind == "offset":
        big = cupy.zeros((a.shape[0] + 1,) + a.shape[1:], a.dtype)
        big[1:] = a
        return big[1:]
    rev = cupy.ascontiguousarray(a[..., ::-1])
    return rev[..., ::-1]


def _check(out, ref, dtype, ref_rounded):
    bound = tf32_tolerance(ref, ref_rounded) if ref_rounded is not None else tolerance(dtype, ref)
    err = rel_error(out, ref)
    assert err <= bound, f"relative error {err:.3e} > bound {bound:.3e}"


@pytest.fixture
def unfold_forced():
    staging.UNFOLD_W = True
    try:
        yield
    finally:
        staging.UNFOLD_W = None


@pytest.mark.parametrize("dtype,precision", KINDS, ids=lambda v: str(v))
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("view", ["plain", "offset", "reversed"])
@pytest.mark.parametrize("w_copied", [False, True], ids=["w-read", "w-copied"])
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_forward_unfolded(unfold_forced, monkeypatch, case, layout, view, w_copied, dtype,
                          precision):
    import cupy

    n, c, k, sp, ker, opts = case
    if w_copied:  # the channels-first weights' transposed copy instead of the kernel's own read
        monkeypatch.setattr(staging, "_W_CF_MAX_FLOPS", -1)
    rng = rng_for("unfold-fwd", _id(case), layout, view, w_copied, dtype)
    x = random_array(rng, (n, c, *sp), dtype)
    w = random_array(rng, (k, c, *ker), dtype)
    bias = random_array(rng, (k,), dtype)
    ref_fn = lambda x_, w_: reference.conv(x_, w_, np.asarray(bias, np.float64), **opts)  # noqa: E731
    ref = ref_fn(np.asarray(x, np.float64), np.asarray(w, np.float64))
    rounded = None
    if precision == "tf32":
        rounded = ref_fn(round_tf32(x).astype(np.float64), round_tf32(w).astype(np.float64))
    xg, wg = cupy.asarray(x), cupy.asarray(w)
    if layout == "NHWC":
        xg, wg = (cupy.ascontiguousarray(cupy.moveaxis(a, 1, -1)) for a in (xg, wg))
        ref, rounded = (None if r is None else np.moveaxis(r, 1, -1) for r in (ref, rounded))
    y = poison(cupy.empty(ref.shape, dtype))
    with launch.record_plans() as log:
        cupyconv.conv(_view(xg, view), wg, cupy.asarray(bias), method="implicit_gemm",
                      precision=precision, layout=layout, out=y, **opts)
    assert log[-1][1][2] == math.prod(ker[:-1]) * _width(c, ker, dtype)
    _check(y, ref, dtype, rounded)


@pytest.mark.parametrize("dtype,precision", KINDS, ids=lambda v: str(v))
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", CASES, ids=_id)
def test_backward_data_unfolds_dy(unfold_forced, case, layout, dtype, precision):
    """Backward-data's phases are forward convolutions of dy: with few output channels (the
    layers' c here, as k) they unfold too."""
    import cupy

    n, c, k, sp, ker, opts = case
    rng = rng_for("unfold-bwd", _id(case), layout, dtype)
    # swap the roles: k = c few channels of dy
    x_shape = (n, k, *sp)
    w = random_array(rng, (c, k, *ker), dtype)
    y_shape = reference.conv(np.zeros(x_shape), np.asarray(w, np.float64), **opts).shape
    dy = random_array(rng, y_shape, dtype)
    ref_fn = lambda d, w_: reference.conv_backward_data(d, w_, x_shape, **opts)  # noqa: E731
    ref = ref_fn(np.asarray(dy, np.float64), np.asarray(w, np.float64))
    rounded = None
    if precision == "tf32":
        rounded = ref_fn(round_tf32(dy).astype(np.float64), round_tf32(w).astype(np.float64))
    dyg, wg, shape = cupy.asarray(dy), cupy.asarray(w), x_shape
    if layout == "NHWC":
        dyg, wg = (cupy.ascontiguousarray(cupy.moveaxis(a, 1, -1)) for a in (dyg, wg))
        ref, rounded = (None if r is None else np.moveaxis(r, 1, -1) for r in (ref, rounded))
        shape = (n, *sp, k)
    dx = poison(cupy.empty(ref.shape, dtype))
    cupyconv.conv_backward_data(dyg, wg, shape, precision=precision, layout=layout, out=dx,
                                **opts)
    _check(dx, ref, dtype, rounded)
