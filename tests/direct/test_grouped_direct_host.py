"""The grouped direct kernel (grouped_conv.cu) executed on the CPU through ``host_kernels``: its
own source, launched with the arguments the GPU launcher builds (``_direct.grouped.grouped_launch``),
against the float64 reference.  Every register tile; groups 2-32 with 1-32 channels per group,
odd counts included (partial channel chunks); strides, padding forms, dilation, 1-3 spatial dims,
both layouts, views with negative strides; bias, residual and activation; a weight chunk loop
(a group's weights larger than the staged chunk) and several blocks of pixels.  Also the
register-tile choice and the applicability rules.  Skipped without a host C++20 compiler."""

import numpy as np
import pytest

from cupyconv import reference
from cupyconv._core.activation import activation_code
from cupyconv._core.dtypes import numpy_dtype
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import GROUPED_TILES, grouped_module
from cupyconv._core.verify import random_array, rel_error, tolerance
from cupyconv._direct.grouped import grouped_applicable, grouped_launch, grouped_plan

from gpu_cases import rng_for
from host_kernels import compiler, host_module


def _geom(n, c, k, sp, ker, layout, dtype, **opts):
    g = opts.get("groups", 1)
    xs = (n, *sp, c) if layout == "NHWC" else (n, c, *sp)
    ws = (k, *ker, c // g) if layout == "NHWC" else (k, c // g, *ker)
    return ConvGeometry.from_shapes(xs, ws, layout=layout, dtype=dtype, **opts)


# n, c, k, spatial, kernel, options
CASES = [
    dict(n=2, c=8, k=8, sp=(9, 10), ker=(3, 3), opts=dict(padding=1, groups=2)),
    dict(n=1, c=12, k=20, sp=(8, 7), ker=(3, 3), opts=dict(stride=2, padding="same", groups=4)),
    dict(n=1, c=24, k=40, sp=(7, 9), ker=(3, 2),
         opts=dict(padding=[(1, 0), (2, 1)], dilation=(2, 1), groups=8)),
    dict(n=2, c=64, k=96, sp=(5, 6), ker=(3, 3), opts=dict(padding=1, groups=32)),
    dict(n=1, c=32, k=64, sp=(6, 5), ker=(1, 1), opts=dict(groups=32)),      # Cg = 1, Kg = 2
    dict(n=2, c=6, k=9, sp=(13,), ker=(4,), opts=dict(stride=3, padding=2, groups=3)),
    dict(n=1, c=8, k=4, sp=(4, 5, 6), ker=(2, 3, 3), opts=dict(padding=1, groups=4)),
]


def _case_id(case):
    o = case["opts"]
    return f"c{case['c']}k{case['k']}-{'x'.join(map(str, case['ker']))}-g{o['groups']}"


def _run(case, layout, dtype, tile, *, bias=True, z=False, act=None, view=False):
    geom = _geom(case["n"], case["c"], case["k"], case["sp"], case["ker"], layout, dtype,
                 **case["opts"])
    rng = rng_for("grouped-host", _case_id(case), layout, dtype, tile, z, act, view)
    x = random_array(rng, geom.input_shape, dtype)
    w = random_array(rng, geom.weight_shape, dtype)
    b = random_array(rng, (geom.out_channels,), dtype) if bias else None
    zz = random_array(rng, geom.output_shape, dtype) if z else None
    if view:  # x and w read through negative strides (the channel dim reversed twice)
        c_axis = -1 if geom.channels_last else 1
        x = np.flip(np.flip(x, c_axis).copy(), c_axis)
        w = np.flip(np.flip(w, 0).copy(), 0)
    y = np.full(geom.output_shape, np.nan, numpy_dtype(dtype))
    grid, block, args, smem = grouped_launch(geom, x, w, b, y, zz, activation_code(act), tile)
    module = grouped_module(dtype)
    host_module(module).call(module.name_expression("grouped_conv", dtype, tile), grid, block,
                             args, smem)
    f64 = [None if a is None else a.astype(np.float64) for a in (x, w, b, zz)]
    ref = reference.conv(f64[0], f64[1], f64[2], layout=layout, **case["opts"])
    if z:
        ref = ref + f64[3]
    if act == "relu":
        ref = np.maximum(ref, 0)
    return y, ref


pytestmark = pytest.mark.skipif(compiler() is None, reason="no host C++ compiler")


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_host_kernel_matches_reference(case, layout):
    for dtype, tile in (("float64", GROUPED_TILES[1]), ("float32", GROUPED_TILES[0])):
        y, ref = _run(case, layout, dtype, tile)
        assert rel_error(y, ref) <= tolerance(dtype, ref), (dtype, tile)


@pytest.mark.parametrize("tile", GROUPED_TILES)
def test_every_tile_with_views_and_the_epilogue(tile):
    case = CASES[2]
    for layout in ("NCHW", "NHWC"):
        y, ref = _run(case, layout, "float64", tile, z=True, act="relu", view=True)
        assert rel_error(y, ref) <= tolerance("float64", ref), layout


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_host_kernel_16_bit_storage(dtype):
    y, ref = _run(CASES[1], "NHWC", dtype, GROUPED_TILES[1], z=True)
    assert rel_error(y, ref) <= tolerance(dtype, ref)


def test_weight_chunks_and_several_pixel_blocks():
    """A group of 64 channels x 9 taps x 16 outputs holds 9216 weights: staged in chunks of
    GC_WEIGHTS; 2 x 24 x 25 pixels are several blocks of 256 threads x TW pixels."""
    case = dict(n=2, c=128, k=40, sp=(24, 25), ker=(3, 3), opts=dict(padding=1, groups=2))
    y, ref = _run(case, "NCHW", "float32", (16, 2), z=True)
    assert rel_error(y, ref) <= tolerance("float32", ref)


def test_applicability_and_tile_choice():
    g = _geom(32, 256, 256, (28, 28), (3, 3), "NCHW", "float32", padding=1, groups=32)
    assert grouped_applicable(g)
    tile, seconds = grouped_plan(g, 132)
    assert tile in GROUPED_TILES and seconds > 0
    # Kg = 4: no tile wider than the narrowest that covers the group's channels
    g4 = _geom(32, 128, 128, (56, 56), (3, 3), "NCHW", "float32", padding=1, groups=32)
    assert grouped_plan(g4, 132)[0][0] == min(t[0] for t in GROUPED_TILES)
    # channels-last is estimated slower (a warp's pixels lie C elements apart)
    gl = _geom(32, 256, 256, (28, 28), (3, 3), "NHWC", "float32", padding=1, groups=32)
    assert grouped_plan(gl, 132)[1] > seconds
    for bad in (_geom(2, 8, 8, (9, 9), (3, 3), "NCHW", "float32", padding=1),             # groups 1
                _geom(2, 8, 8, (9, 9), (3, 3), "NCHW", "float32", padding=1, groups=8),   # depthwise
                _geom(1, 4, 4, (12, 12), (7, 7), "NCHW", "float32", groups=2)):            # 49 taps
        assert not grouped_applicable(bad)


def test_registry_has_every_dtype_and_tile():
    """The GPU-free compile check compiles the registry: every dtype's module of the kernel is in
    it, each instantiating every register tile the plan may pick."""
    from cupyconv._core.kernels import DTYPES, REGISTRY

    for dtype in DTYPES:
        module = grouped_module(dtype)
        assert module in REGISTRY
        for tile in GROUPED_TILES:
            assert module.name_expression("grouped_conv", dtype, tile) in module.name_expressions
