"""Non-finite values reach exactly the outputs PyTorch's float64 result gives them.

One NaN, and separately one inf, is planted at a corner, an edge and an interior position of the
operand a pass reads as activations (x of the forward, backward-weight and transposed passes, dy of
backward-data), for every kernel family (dense, strided/dilated, grouped with and without merged
groups, depthwise with and without a channel multiplier, the fused separable kernel), every
method of each pass, both layouts, 1-3 spatial dims and every floating dtype.  The result's NaN
mask and its inf mask (with signs) must equal those of PyTorch's float64 CPU result on the same
(dtype-rounded) inputs, and its finite values must agree within the dtype's tolerance.  Weights
are drawn away from zero, so that a planted inf times a tap is never 0 * inf.
"""

from __future__ import annotations

import contextlib
import zlib
from dataclasses import dataclass, field

import numpy as np
import pytest

from trust_helpers import to_host

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")
F = torch.nn.functional

DTYPES = ("float32", "float64", "float16", "bfloat16")
FINITE_TOL = {"float64": 1e-10, "float32": 1e-4, "float16": 2e-2, "bfloat16": 8e-2}


@dataclass(frozen=True)
class Problem:
    """A convolution given channels-first: x (N, C, *spatial), w (K, C/groups, *kernel)."""

    name: str
    x: tuple
    w: tuple
    stride: int = 1
    padding: int = 1
    dilation: int = 1
    groups: int = 1
    # forward methods besides auto (each must apply to the problem)
    methods: tuple = ("implicit_gemm", "im2col_gemm", "direct")
    merges: tuple = (None,)  # forced group-merge factors of the implicit GEMM (None: its choice)
    backward_methods: tuple = ("implicit_gemm",)
    extra: dict = field(default_factory=dict)

    @property
    def ndim(self):
        return len(self.x) - 2


PROBLEMS = [
    Problem("dense", (2, 6, 11, 13), (8, 6, 3, 3)),
    Problem("strided-dilated", (2, 5, 13, 12), (7, 5, 3, 3), stride=2, padding=2, dilation=2),
    Problem("grouped", (2, 16, 10, 11), (16, 4, 3, 3), groups=4,
            methods=("implicit_gemm", "im2col_gemm", "direct", "grouped_direct"),
            merges=(None, 1, 2, 4)),
    Problem("grouped-s2", (2, 12, 13, 9), (24, 6, 3, 3), stride=2, groups=2,
            methods=("implicit_gemm", "grouped_direct"), merges=(None, 1, 2)),
    Problem("grouped-1x1-3d", (2, 12, 5, 6, 4), (32, 3, 1, 1, 1), padding=0, groups=4,
            methods=("implicit_gemm", "direct"), merges=(None, 2, 4)),
    Problem("depthwise", (2, 8, 12, 13), (8, 1, 3, 3), groups=8,
            methods=("depthwise", "implicit_gemm", "direct"),
            backward_methods=("depthwise", "implicit_gemm")),
    Problem("depthwise-5x5-s2", (2, 16, 15, 14), (16, 1, 5, 5), stride=2, padding=2, groups=16,
            methods=("depthwise", "direct"), backward_methods=("depthwise", "implicit_gemm")),
    Problem("depthwise-multiplier", (2, 4, 9, 11), (8, 1, 3, 3), groups=4,
            methods=("depthwise", "direct"), backward_methods=("depthwise",)),
    Problem("depthwise-1d", (3, 8, 37), (8, 1, 5), padding=2, groups=8,
            methods=("depthwise", "direct"), backward_methods=("depthwise",)),
    Problem("depthwise-3d", (2, 8, 5, 6, 7), (8, 1, 3, 3, 3), groups=8,
            methods=("depthwise", "direct"), backward_methods=("depthwise",)),
    Problem("dense-1d", (2, 5, 29), (6, 5, 4), stride=3, padding=2),
    Problem("dense-3d", (1, 3, 6, 7, 5), (4, 3, 3, 3, 3), padding=1,
            methods=("implicit_gemm", "direct")),
]


def _positions(spatial):
    """Corner, edge (first row, middle column) and interior positions of a spatial shape."""
    corner = tuple(0 for _ in spatial)
    if len(spatial) > 1:
        edge = (0,) + tuple(s // 2 for s in spatial[1:])
    else:  # (1-d: the last element, the other end from the corner)
        edge = (spatial[0] - 1,)
    interior = tuple(s // 2 for s in spatial)
    return {"corner": corner, "edge": edge, "interior": interior}


def _rng_array(rng, shape, dtype, away_from_zero=False):
    a = rng.uniform(-1, 1, shape)
    if away_from_zero:
        a = np.sign(a) * (0.25 + 0.75 * np.abs(a))
    return _round(a, dtype)


def _round(a, dtype):
    """``a`` rounded to ``dtype`` (a NumPy array of that dtype; ml_dtypes for bfloat16)."""
    if dtype == "bfloat16":
        import ml_dtypes

        return a.astype(ml_dtypes.bfloat16)
    return a.astype(dtype)


def _to_layout(a, layout):
    """A channels-first host array in ``layout`` (channels moved last for NHWC)."""
    return np.ascontiguousarray(np.moveaxis(a, 1, -1)) if layout == "NHWC" else a


def _from_layout(a, layout):
    return np.moveaxis(a, -1, 1) if layout == "NHWC" else a


def _t(a):
    return torch.from_numpy(np.asarray(a, dtype=np.float64).copy())


def _conv_fn(ndim, transposed=False):
    return getattr(F, f"conv_transpose{ndim}d" if transposed else f"conv{ndim}d")


def _compare(out, ref, dtype, what):
    """NaN mask, signed inf mask and finite values of ``out`` (host, channels-first) vs ``ref``."""
    out = np.asarray(out, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    assert out.shape == ref.shape, what
    nan_o, nan_r = np.isnan(out), np.isnan(ref)
    assert np.array_equal(nan_o, nan_r), (
        f"{what}: NaN at {int(nan_o.sum())} outputs, PyTorch at {int(nan_r.sum())}; first "
        f"differences at {np.argwhere(nan_o != nan_r)[:5].tolist()}")
    for sign in (1, -1):
        inf_o, inf_r = out == sign * np.inf, ref == sign * np.inf
        assert np.array_equal(inf_o, inf_r), (
            f"{what}: {sign:+d}inf at {int(inf_o.sum())} outputs, PyTorch at {int(inf_r.sum())}; "
            f"first differences at {np.argwhere(inf_o != inf_r)[:5].tolist()}")
    fin = np.isfinite(ref)
    scale = max(np.abs(ref[fin]).max(initial=0.0), 1.0)
    err = np.abs(out[fin] - ref[fin]).max(initial=0.0) / scale
    assert err <= FINITE_TOL[dtype], f"{what}: finite values differ by {err:.3g} (relative)"


def _cases():
    for p in PROBLEMS:
        for layout in ("NCHW", "NHWC"):
            for dtype in DTYPES:
                yield pytest.param(p, layout, dtype, id=f"{p.name}-{layout}-{dtype}")


def _planted(rng, shape, dtype, where, value):
    """A random channels-first operand of ``shape`` with ``value`` at spatial position ``where``
    of one (image, channel)."""
    a = rng.uniform(-1, 1, shape)
    a[(shape[0] - 1, shape[1] // 2) + where] = value
    return _round(a, dtype)


def _merge_context(factor):
    if factor is None:
        return contextlib.nullcontext()
    from cupyconv._gemm.grouped import forced_merge

    return forced_merge(factor)


@pytest.mark.parametrize("problem,layout,dtype", list(_cases()))
def test_forward_and_backward_passes(problem, layout, dtype):
    import cupy

    import cupyconv as cc

    p = problem
    rng = np.random.default_rng(zlib.crc32(f"{p.name} {layout} {dtype}".encode()))
    opts = dict(stride=p.stride, padding=p.padding, dilation=p.dilation, groups=p.groups)
    w_h = _rng_array(rng, p.w, dtype, away_from_zero=True)
    b_h = _rng_array(rng, (p.w[0],), dtype)
    w_d = cupy.asarray(_to_layout(w_h, layout))
    b_d = cupy.asarray(b_h)
    conv_t = _conv_fn(p.ndim)
    y_shape = tuple(conv_t(_t(np.zeros(p.x)), _t(w_h), **opts).shape)
    ran = 0
    for where_name, where in _positions(p.x[2:]).items():
        for value in (np.nan, np.inf):
            tag = f"{p.name} {layout} {dtype} {value} at {where_name}"
            # forward: x planted
            x_h = _planted(rng, p.x, dtype, where, value)
            ref = conv_t(_t(x_h), _t(w_h), _t(b_h), **opts).numpy()
            x_d = cupy.asarray(_to_layout(x_h, layout))
            for method in ("auto",) + p.methods:
                for merge in (p.merges if method in ("auto", "implicit_gemm") else (None,)):
                    with _merge_context(merge):
                        y = cc.conv(x_d, w_d, b_d, layout=layout, method=method, **opts)
                    _compare(_from_layout(to_host(y), layout), ref, dtype,
                             f"forward {method} merge={merge}: {tag}")
                    ran += 1
            # backward-weight: x planted (dy finite)
            dy_h = _rng_array(rng, y_shape, dtype, away_from_zero=True)
            dy_d = cupy.asarray(_to_layout(dy_h, layout))
            ref = torch.nn.grad.__dict__[f"conv{p.ndim}d_weight"](
                _t(x_h), p.w, _t(dy_h), **opts).numpy()
            for method in ("auto",) + p.backward_methods:
                for merge in (p.merges if method in ("auto", "implicit_gemm") else (None,)):
                    with _merge_context(merge):
                        dw = cc.conv_backward_weight(x_d, dy_d, _to_layout(np.zeros(p.w), layout).shape,
                                                     layout=layout, method=method, **opts)
                    _compare(_from_layout(to_host(dw), layout), ref, dtype,
                             f"backward-weight {method} merge={merge}: {tag}")
                    ran += 1
            # backward-data: dy planted at the same kind of position of the output
            dy_h = _planted(rng, y_shape, dtype, tuple(min(i, s - 1) for i, s in
                                                         zip(where, y_shape[2:])), value)
            ref = torch.nn.grad.__dict__[f"conv{p.ndim}d_input"](
                p.x, _t(w_h), _t(dy_h), **opts).numpy()
            dy_d = cupy.asarray(_to_layout(dy_h, layout))
            x_shape = _to_layout(np.zeros(p.x), layout).shape
            for method in ("auto",) + p.backward_methods:
                for merge in (p.merges if method in ("auto", "implicit_gemm") else (None,)):
                    with _merge_context(merge):
                        dx = cc.conv_backward_data(dy_d, w_d, x_shape, layout=layout,
                                                   method=method, **opts)
                    _compare(_from_layout(to_host(dx), layout), ref, dtype,
                             f"backward-data {method} merge={merge}: {tag}")
                    ran += 1
            # transposed convolution of the planted dy, with a bias: PyTorch's conv_transpose
            # weight is (C_in, C_out / groups, ...): the forward weight read the other way round
            if p.stride == 1 or p.dilation == 1:
                bt_h = _rng_array(rng, (p.x[1],), dtype)
                wt = w_h  # (K, C/g, *k): C_in of the transpose = K
                ref = _conv_fn(p.ndim, True)(_t(dy_h), _t(wt), _t(bt_h), stride=p.stride,
                                             padding=p.padding, dilation=p.dilation,
                                             groups=p.groups).numpy()
                for method in ("auto",) + p.backward_methods:
                    for merge in (p.merges if method in ("auto", "implicit_gemm") else (None,)):
                        with _merge_context(merge):
                            yt = cc.conv_transpose(dy_d, w_d, cupy.asarray(bt_h), layout=layout,
                                                   method=method, stride=p.stride,
                                                   padding=p.padding, dilation=p.dilation,
                                                   groups=p.groups)
                        got = _from_layout(to_host(yt), layout)
                        if got.shape != ref.shape:  # (output_padding would be needed)
                            continue
                        _compare(got, ref, dtype, f"conv_transpose {method} merge={merge}: {tag}")
                        ran += 1
    assert ran > 0


SEPARABLE = [
    ((2, 8, 12, 13), 3, 1, 1),
    ((2, 8, 13, 11), 3, 2, 1),
    ((2, 6, 21), 5, 1, 2),
]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,k,stride,pad", SEPARABLE)
@pytest.mark.parametrize("method", ["fused", "unfused", "auto"])
def test_separable(shape, k, stride, pad, method, layout, dtype):
    import cupy

    import cupyconv as cc

    rng = np.random.default_rng(7)
    ndim = len(shape) - 2
    c = shape[1]
    w_dw_h = _rng_array(rng, (c, 1) + (k,) * ndim, dtype, away_from_zero=True)
    w_pw_h = _rng_array(rng, (5, c) + (1,) * ndim, dtype, away_from_zero=True)
    conv = _conv_fn(ndim)
    for where in _positions(shape[2:]).values():
        for value in (np.nan, np.inf):
            x_h = _planted(rng, shape, dtype, where, value)
            mid = conv(_t(x_h), _t(w_dw_h), stride=stride, padding=pad, groups=c)
            # PyTorch's pointwise conv multiplies every channel, as a 1x1 conv must
            ref = conv(mid, _t(w_pw_h)).numpy()
            try:
                y = cc.separable_conv(cupy.asarray(_to_layout(x_h, layout)),
                                      cupy.asarray(_to_layout(w_dw_h, layout)),
                                      cupy.asarray(_to_layout(w_pw_h, layout)), stride=stride,
                                      padding=pad, layout=layout, method=method)
            except ValueError as e:  # (the fused kernel's documented limits)
                assert method == "fused", e
                pytest.skip(f"fused refused: {e}")
            _compare(_from_layout(to_host(y), layout), ref, dtype,
                     f"separable {method} {layout} {dtype} {value} at {where}")


def _bf16(a):
    import ml_dtypes

    return a.astype(ml_dtypes.bfloat16)


def test_issue45_bf16_backward_data_phases_with_views():
    """Issue 45's case: bf16 backward-data, inf in a flipped dy, a step-2 view of w, stride (2, 3),
    dilation (2, 1), 'same' padding, groups 2, out= given (stride phases over merged groups)."""
    import cupy

    import cupyconv as cc

    rng = np.random.default_rng(45)
    dy_h = _bf16(rng.uniform(-1, 1, (2, 8, 9, 20)))
    dy_h[1, 5, 4, 7] = np.inf
    w_h = _bf16(np.sign(u := rng.uniform(-1, 1, (8, 3, 14, 5))) * (0.25 + np.abs(u)))
    dy = cupy.asarray(np.ascontiguousarray(dy_h[:, :, ::-1]))[:, :, ::-1]  # a flipped view
    w = cupy.asarray(w_h)[:, :, ::2]                                       # a step-2 view
    x_shape = (2, 6, 17, 59)
    opts = dict(stride=(2, 3), dilation=(2, 1), padding="same", groups=2)
    out = cupy.full(x_shape, np.nan, dtype=dy.dtype)
    cc.conv_backward_data(dy, w, x_shape, out=out, **opts)
    ref = cc.reference.conv_backward_data(dy_h.astype(np.float64), w_h[:, :, ::2].astype(np.float64),
                                          x_shape, **opts)
    assert np.isinf(ref).any() and not np.isnan(ref).any()
    _compare(to_host(out), ref, "bfloat16", "issue 45 backward-data")


def test_issue45_bf16_grouped_transpose_3d():
    """Issue 45's case: bf16 3-d conv_transpose, groups 4, 1x1x1 kernel, with bias."""
    import cupy

    import cupyconv as cc

    rng = np.random.default_rng(46)
    x_h = _bf16(rng.uniform(-1, 1, (4, 12, 24, 21, 13)))
    x_h[0, 1, 3, 4, 5] = np.nan
    x_h[3, 10, 23, 0, 12] = np.nan
    w_h = _bf16(rng.uniform(0.25, 1, (12, 8, 1, 1, 1)))
    b_h = _bf16(rng.uniform(-1, 1, (32,)))
    y = cc.conv_transpose(cupy.asarray(x_h), cupy.asarray(w_h), cupy.asarray(b_h), groups=4)
    ref = F.conv_transpose3d(_t(x_h), _t(w_h), _t(b_h), groups=4).numpy()
    assert int(np.isnan(ref).sum()) == 16
    _compare(to_host(y), ref, "bfloat16", "issue 45 conv_transpose")
