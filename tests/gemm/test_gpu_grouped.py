"""Grouped convolution (1 < groups < channels) on the GPU: the grouped direct kernel and the
implicit GEMM on merged groups (block-diagonal weights), forward, backward-data and
backward-weight, against the float64 reference.

Groups 2, 4, 8 and 32 with 2-32 input and 1-32 output channels per group, odd counts included;
both layouts; float32 (exact and TF32), float16 and bfloat16; strides 1 and 2, padding forms,
dilation, bias.  Every output is poisoned before the call.  The merge factor is forced through
``grouped.forced_merge`` to cover each one the problem allows; ``auto`` is checked to pick the new
paths on the ResNeXt layers.  Problems are small (runtime shapes; few compiled variants)."""

import contextlib

import numpy as np
import pytest

import cupyconv
from cupyconv import reference
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.verify import (poison, random_array, rel_error, round_tf32, tf32_tolerance,
                                   tolerance)
from cupyconv._gemm.grouped import forced_merge, merge_factors
from cupyconv._gemm.launch import record_plans

from gpu_cases import rng_for

pytestmark = pytest.mark.gpu

# groups, Cg, Kg, spatial, kernel, options
CASES = [
    (2, 3, 5, (9, 10), (3, 3), dict(padding=1)),
    (4, 8, 8, (8, 7), (3, 3), dict(stride=2, padding="same")),
    (8, 2, 1, (7, 9), (3, 2), dict(padding=[(1, 0), (2, 1)], dilation=(2, 1))),
    (32, 4, 4, (7, 6), (3, 3), dict(padding=1)),
    (32, 8, 8, (9, 8), (3, 3), dict(stride=2, padding=1)),
    (4, 32, 32, (5, 5), (3, 3), dict(padding=1)),
    (8, 5, 3, (13,), (4,), dict(stride=2, padding=2)),
    (2, 16, 6, (4, 5, 3), (2, 3, 1), dict(padding=1)),
    (32, 16, 16, (4, 4), (1, 1), dict()),
]
LAYOUTS = ("NCHW", "NHWC")
# (storage dtype, precision)
KINDS = [("float32", "exact"), ("float32", "tf32"), ("float16", "exact"), ("bfloat16", "exact")]


def case_id(case):
    g, cg, kg, sp, ker, o = case
    return (f"g{g}-c{cg}k{kg}-{'x'.join(map(str, sp))}-{'x'.join(map(str, ker))}-"
            f"s{o.get('stride', 1)}-p{o.get('padding', 0)}-d{o.get('dilation', 1)}").replace(" ", "")


def kind_id(kind):
    return kind[0] if kind[1] == "exact" else kind[1]


def _shapes(case, layout):
    g, cg, kg, sp, ker, opts = case
    n, c, k = 2, g * cg, g * kg
    if layout == "NHWC":
        return (n, *sp, c), (k, *ker, cg), dict(opts, groups=g, layout=layout)
    return (n, c, *sp), (k, cg, *ker), dict(opts, groups=g, layout=layout)


def _operands(case, layout, dtype, tag):
    """Host arrays (x, w, dy, bias) of the case, and the call options."""
    xs, ws, opts = _shapes(case, layout)
    ys = cupyconv.output_shape(xs, ws, **opts)
    rng = rng_for(tag, case_id(case), layout, dtype)
    return ([random_array(rng, s, dtype) for s in (xs, ws, ys, (ws[0],))], opts)


def _check(got, ref_of, hosts, dtype, precision, note=""):
    """``got`` against ``ref_of(*hosts)`` (the float64 reference): the dtype's bound, or for TF32
    the bound from the reference on TF32-rounded inputs."""
    ref = ref_of(*hosts)
    if precision == "tf32":
        bound = tf32_tolerance(ref, ref_of(*(round_tf32(h) for h in hosts)))
    else:
        bound = tolerance(dtype, ref)
    err = rel_error(got, ref)
    assert err <= bound, f"{note}: relative error {err:.3e} > bound {bound:.3e}"


def _f64(a):
    return a.astype(np.float64)


def _factors(case, layout):
    """1 and the smallest and largest merge factor of the case (each distinct merged shape class)."""
    xs, ws, opts = _shapes(case, layout)
    geom = ConvGeometry.from_shapes(xs, ws, **opts)
    fs = merge_factors(geom)
    return sorted({1, *fs[:1], *fs[-1:]})


@pytest.mark.parametrize("method", ["auto", "implicit_gemm", "grouped_direct"])
@pytest.mark.parametrize("kind", KINDS, ids=kind_id)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_forward(case, layout, kind, method):
    import cupy

    dtype, precision = kind
    (xh, wh, _, bh), opts = _operands(case, layout, dtype, "fwd")
    y = poison(cupy.empty(cupyconv.output_shape(xh.shape, wh.shape, **opts), dtype))
    got = cupyconv.conv(cupy.asarray(xh), cupy.asarray(wh), cupy.asarray(bh), method=method,
                        precision=precision, out=y, **opts)
    assert got is y
    _check(y, lambda x, w, b: reference.conv(_f64(x), _f64(w), _f64(b), **opts), (xh, wh, bh),
           dtype, precision, method)


@pytest.mark.parametrize("kind", KINDS, ids=kind_id)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_every_merge_factor_in_all_three_passes(case, layout, kind):
    """The implicit GEMM's forward, backward-data and backward-weight with each merge factor
    forced (1 = groups as they are), the launches recorded to prove the merged shape ran."""
    import cupy

    dtype, precision = kind
    (xh, wh, dyh, bh), opts = _operands(case, layout, dtype, "merge")
    x, w, dy, b = (cupy.asarray(a) for a in (xh, wh, dyh, bh))
    g = opts["groups"]
    for f in _factors(case, layout):
        note = f"merge {f}"
        with forced_merge(f), record_plans() as log:
            y = poison(cupy.empty(dyh.shape, dtype))
            cupyconv.conv(x, w, b, method="implicit_gemm", precision=precision, out=y, **opts)
            dx = poison(cupy.empty(xh.shape, dtype))
            cupyconv.conv_backward_data(dy, w, xh.shape, method="implicit_gemm",
                                        precision=precision, out=dx, **opts)
            dw = poison(cupy.empty(wh.shape, dtype))
            cupyconv.conv_backward_weight(x, dy, wh.shape, method="implicit_gemm",
                                          precision=precision, out=dw, **opts)
        batches = {shape[3] for kernel, shape, _ in log if kernel != "gemm"}
        assert batches <= {g // f}, (note, log)
        _check(y, lambda x, w, b: reference.conv(_f64(x), _f64(w), _f64(b), **opts),
               (xh, wh, bh), dtype, precision, f"forward, {note}")
        _check(dx, lambda dy, w: reference.conv_backward_data(_f64(dy), _f64(w), xh.shape, **opts),
               (dyh, wh), dtype, precision, f"backward-data, {note}")
        _check(dw, lambda x, dy: reference.conv_backward_weight(_f64(x), _f64(dy), wh.shape,
                                                                **opts),
               (xh, dyh), dtype, precision, f"backward-weight, {note}")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("method", ["implicit_gemm", "grouped_direct"])
def test_epilogue_views_and_weight_views(layout, method):
    """Residual z and activation in the fused epilogue; x, w and bias given as views with
    negative strides (the merged path expands a contiguous copy of w)."""
    import cupy

    case = CASES[3]
    (xh, wh, zh, bh), opts = _operands(case, layout, "float32", "epilogue")
    c_axis = -1 if layout == "NHWC" else 1
    x = cupy.flip(cupy.ascontiguousarray(cupy.flip(cupy.asarray(xh), c_axis)), c_axis)
    w = cupy.flip(cupy.ascontiguousarray(cupy.flip(cupy.asarray(wh), 0)), 0)
    b = cupy.asarray(np.ascontiguousarray(bh[::-1]))[::-1]
    merge = forced_merge(8) if method == "implicit_gemm" else contextlib.nullcontext()
    with merge:
        y = cupyconv.conv(x, w, b, method=method, z=cupy.asarray(zh), activation="silu", **opts)
    pre = reference.conv(_f64(xh), _f64(wh), _f64(bh), **opts) + zh
    ref = pre / (1 + np.exp(-pre))
    assert rel_error(y, ref) <= tolerance("float32", ref)


RESNEXT = [(128, 56), (256, 28), (512, 14), (1024, 7)]


@pytest.mark.parametrize("width,size", RESNEXT)
def test_auto_takes_the_new_paths_on_resnext_layers(width, size):
    """ResNeXt-50 (32x4d) 3x3 layers: at batch 32 ``auto`` plans float32 channels-first on the
    grouped direct kernel and float16 channels-last on the implicit GEMM (merged where Cg < 32);
    at batch 4, what auto runs is right and the GEMM launches are the reported ones."""
    import cupy

    from cupyconv._dispatch.choose import describe

    for dtype, layout, algo in (("float32", "NCHW", "grouped_direct"),
                                ("float16", "NHWC", "implicit_gemm")):
        opts = dict(padding=1, groups=32, layout=layout)

        def shapes(n):
            if layout == "NHWC":
                return (n, size, size, width), (width, 3, 3, width // 32)
            return (n, width, size, size), (width, width // 32, 3, 3)

        info = describe(ConvGeometry.from_shapes(*shapes(32), dtype=dtype, **opts))
        assert info["algorithm"] == algo
        if algo == "implicit_gemm" and width < 1024:
            assert info["gemm"]["merge"] > 1
        xs, ws = shapes(4)
        info = describe(ConvGeometry.from_shapes(xs, ws, dtype=dtype, **opts))
        rng = rng_for("resnext", width, dtype)
        xh, wh = random_array(rng, xs, dtype), random_array(rng, ws, dtype)
        with record_plans() as log:
            y = cupyconv.conv(cupy.asarray(xh), cupy.asarray(wh), **opts)
        g = info["gemm"]
        if g is not None:
            assert [(k, s) for k, s, _ in log] == [(g["kernel"], (g["m"], g["n"], g["k"],
                                                                   g["batch"]))]
            assert g["kernel"] != "conv_fprop" or g["batch"] * g["merge"] == 32
        ref = reference.conv(_f64(xh), _f64(wh), **opts)
        assert rel_error(y, ref) <= tolerance(dtype, ref)


def test_grouped_direct_refuses_what_it_cannot_run():
    import cupy

    x = cupy.ones((1, 8, 9, 9), "float32")
    with pytest.raises(ValueError, match="grouped_direct"):
        cupyconv.conv(x, cupy.ones((8, 8, 3, 3), "float32"), method="grouped_direct")  # groups 1
    with pytest.raises(ValueError, match="grouped_direct"):
        cupyconv.conv(x, cupy.ones((8, 1, 3, 3), "float32"), groups=8, method="grouped_direct")
    with pytest.raises(ValueError, match="grouped_direct"):
        cupyconv.conv(x, cupy.ones((8, 4, 7, 7), "float32"), groups=2, method="grouped_direct")
