"""Channels-first depthwise backward-data staged through the channels-last kernel
(cupyconv._depthwise.launch.stage_channels_last), on the CPU: which problems take the staged
route, and the route itself run end to end on the host -- run_depthwise_backward_data on
NumPy-backed arrays, its scratch copies through copy_into (the element-wise strided_copy compiled
for the host; the tiled transpose, whose index math tests/core/test_program.py emulates, stood in
for by a NumPy copy) and the channels-last kernel (depthwise_cl.cu) through host_kernels --
against the float64 reference, with poisoned outputs and scratch.  The GPU run is in
test_gpu_depthwise.py (test_staged_backward_data_matches_reference)."""

import dataclasses
import zlib
from types import SimpleNamespace

import numpy as np
import pytest

from cupyconv import reference
from cupyconv._core import launch as core_launch
from cupyconv._core.dtypes import numpy_dtype
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.verify import random_array, rel_error, tolerance
from cupyconv._depthwise import channels_last as cl
from cupyconv._depthwise import launch

from host_route import HostArray, host_empty

# (the band kernel would take these problems over)
pytestmark = pytest.mark.usefixtures("no_bands")


def _geom(sp, k=3, c=8, mult=1, layout="NCHW", dtype="float32", n=2, **opts):
    ks = k if isinstance(k, tuple) else (k,) * len(sp)
    if layout == "NHWC":
        xs, ws = (n, *sp, c), (c * mult, *ks, 1)
    else:
        xs, ws = (n, c, *sp), (c * mult, 1, *ks)
    return ConvGeometry.from_shapes(xs, ws, groups=c, layout=layout, dtype=dtype, **opts)


# ---------------------------------------------------------------------------- the decision

@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("k,stride,dilation", [
    (3, 2, 1), (5, 2, 1), (7, 2, 1), (3, (2, 1), 1), (3, (1, 2), 1), (3, 3, 1), (3, 2, 2),
    (4, 2, 1), ((3, 5), (1, 2), 1),
])
def test_strided_channels_first_backward_data_stages(dtype, k, stride, dilation):
    """Every dtype, filter shape, stride in H or W and dilation the channels-last kernel takes."""
    g = _geom((17, 19), k=k, c=24, stride=stride, dilation=dilation, padding=1, dtype=dtype)
    assert launch.stage_channels_last(g)


def test_staging_covers_one_and_three_spatial_dims():
    """The channels-last kernel walks D as it walks H: a stride in H or W of a 3-d problem stages,
    a stride in D alone does not (not a tile-kernel weakness that was measured)."""
    assert launch.stage_channels_last(_geom((13,), c=8, stride=2, padding=1))
    assert launch.stage_channels_last(_geom((5, 9, 11), c=8, stride=(1, 2, 2), padding=1))
    assert launch.stage_channels_last(_geom((5, 9, 11), c=8, stride=(1, 1, 2), padding=1))
    assert not launch.stage_channels_last(_geom((5, 9, 11), c=8, stride=(2, 1, 1), padding=1))


def test_what_does_not_stage():
    # unit stride (the tile kernel is fast there), also with dilation
    assert not launch.stage_channels_last(_geom((17, 19), padding=1))
    assert not launch.stage_channels_last(_geom((17, 19), padding=2, dilation=2))
    # a channel multiplier: the channels-last kernel takes none
    assert not launch.stage_channels_last(_geom((17, 19), mult=2, stride=2, padding=1))
    assert not launch.stage_channels_last(_geom((17, 19), c=1, mult=3, stride=2, padding=1))
    # channels-last problems run on the channels-last kernel directly
    assert not launch.stage_channels_last(_geom((17, 19), layout="NHWC", stride=2, padding=1))
    # filters too large for the channels-last kernel's shared memory
    huge = _geom((40, 40), c=16, k=61, stride=2, padding=30, dtype="float16")
    assert cl.pass_plan(dataclasses.replace(huge, layout="NHWC"), True, 8) is None
    assert not launch.stage_channels_last(huge)
    # grouped (not depthwise) problems do not reach it, but it says no all the same
    grouped = ConvGeometry.from_shapes((2, 8, 9, 9), (8, 2, 3, 3), groups=4, stride=2,
                                       dtype="float32")
    assert not launch.stage_channels_last(grouped)


def test_one_channel_stages():
    """A single-channel depthwise problem (C == K == 1) has no multiplier: it stages (one channel
    per thread)."""
    assert launch.stage_channels_last(_geom((17, 19), c=1, stride=2, padding=1))


def test_packed_helpers_match_arrays():
    """packed_strides and packed_vector_width are what element_strides and vector_width give for
    a C-contiguous, aligned channels-last array."""
    for sp, c, dtype in (((7,), 8, "float32"), ((5, 6), 12, "float16"), ((3, 4, 5), 6, "float64"),
                         ((4, 5), 3, "bfloat16")):
        g = _geom(sp, c=c, layout="NHWC", dtype=dtype, padding=1)
        a = np.empty(g.input_shape, numpy_dtype(dtype))
        view = SimpleNamespace(shape=a.shape, strides=a.strides, itemsize=a.itemsize,
                               data=SimpleNamespace(ptr=0))
        strides = core_launch.element_strides(a, True)
        assert cl.packed_strides(g, sp) == strides
        assert cl.packed_vector_width(g) == cl.vector_width(g, ((view, strides),))


# ---------------------------------------------------------------------------- the route, on the host

# (dtype, n, c, spatial, kernel, options)
STAGED_CASES = [
    ("float32", 2, 8, (17, 19), 3, dict(stride=2, padding=1)),
    ("float32", 2, 8, (15, 13), 5, dict(stride=2, padding=2)),
    ("float16", 3, 8, (11, 17), 3, dict(stride=2, padding=1)),
    ("float16", 2, 12, (13, 9), 5, dict(stride=2, padding=2)),
    ("bfloat16", 2, 8, (9, 11), 3, dict(stride=2, padding=1)),
    ("float64", 2, 6, (9, 11), 3, dict(stride=2, padding=1)),
    ("float32", 2, 4, (11, 13), 3, dict(stride=(2, 1), padding=1)),
    ("float32", 2, 4, (11, 13), 3, dict(stride=(1, 2), padding=1)),
    ("float32", 2, 4, (13, 14), 3, dict(stride=2, padding=2, dilation=2)),
    ("float32", 2, 5, (12, 11), 3, dict(stride=3, padding=[(2, 0), (0, 1)])),
    ("float16", 2, 3, (10, 9), 3, dict(stride=2, padding="same")),
    ("float32", 1, 4, (5, 7, 9), 3, dict(stride=(1, 2, 2), padding=1)),
    ("float32", 2, 8, (21,), 5, dict(stride=2, padding=2)),
    # 16 channels and >= 16 pixels: both copies are tiled transposes
    ("float32", 2, 16, (9, 11), 3, dict(stride=2, padding=1)),
]


def _case_id(case):
    dtype, n, c, sp, k, o = case
    return (f"{dtype}-n{n}c{c}-{'x'.join(map(str, sp))}-k{k}-"
            + "-".join(f"{a}{v}" for a, v in o.items()))


def _problem(case):
    dtype, n, c, sp, k, o = case
    g = _geom(sp, k=k, c=c, n=n, dtype=dtype, **o)
    rng = np.random.default_rng(zlib.crc32(_case_id(case).encode()))
    dy, w = (random_array(rng, s, dtype) for s in (g.output_shape, g.weight_shape))
    return g, dy, w, dict(o, groups=c)


def _run(g, dy, w):
    dx = host_empty(g.input_shape, g.dtype)
    assert launch.run_depthwise_backward_data(g, dy.view(HostArray), w.view(HostArray), dx) is False
    return np.asarray(dx)


@pytest.mark.parametrize("case", STAGED_CASES, ids=_case_id)
def test_staged_route_matches_reference(case, host_route):
    g, dy, w, opts = _problem(case)
    assert launch.stage_channels_last(g)
    dx = _run(g, dy, w)
    ref = reference.conv_backward_data(dy, w, g.input_shape, **opts)
    assert rel_error(dx, ref) <= tolerance(g.dtype, ref)
    assert host_route.passes == ["NHWC"]  # the pass ran on the channels-last twin
    c, pixels = g.in_channels, (np.prod(g.out_spatial), np.prod(g.spatial))
    expect_tiled = [s for s, p in zip((g.output_shape, g.input_shape), pixels) if min(c, p) >= 16]
    assert host_route.tiled == expect_tiled


def test_staged_route_reads_dy_views(host_route):
    """dy as a strided, offset view with reversed W (the first copy reads it through its
    strides)."""
    g, dy, w, opts = _problem(STAGED_CASES[0])
    n, c, oh, ow = dy.shape
    big = np.zeros((n, c + 2, 2 * oh + 1, ow + 3), dy.dtype)
    big[:, 1:c + 1, 1::2, 2:ow + 2] = dy[..., ::-1]
    view = big[:, 1:c + 1, 1::2, 2:ow + 2][..., ::-1]
    np.testing.assert_array_equal(view, dy)
    dx = _run(g, view, w)
    ref = reference.conv_backward_data(dy, w, g.input_shape, **opts)
    assert rel_error(dx, ref) <= tolerance(g.dtype, ref)


def test_unit_stride_keeps_the_channels_first_pass(host_route, monkeypatch):
    """Problems that do not stage go to run_pass on their own geometry, as before (the pass itself
    is not run here: the tile kernel has no host build)."""
    seen = []
    monkeypatch.setattr(launch, "run_pass", lambda geom, *a: seen.append((geom, a[-1])))
    for g in (_geom((9, 11), padding=1), _geom((9, 11), mult=2, stride=2, padding=1)):
        seen.clear()
        launch.run_depthwise_backward_data(g, host_empty(g.output_shape, g.dtype),
                                           host_empty(g.weight_shape, g.dtype),
                                           host_empty(g.input_shape, g.dtype))
        assert len(seen) == 1 and seen[0] == (g, True)
