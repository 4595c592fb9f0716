"""The channels-first band kernel (depthwise_bands.cu) on the CPU, through the launch path
(run_depthwise and run_depthwise_backward_data under the ``host_route`` fixture, with the band
kernel preferred wherever it applies): forward at stride 1 and 2 with bias and a channel
multiplier, backward-data at unit stride and stride 2 (pads beyond K - 1, output padding);
square and rectangular filters up to 7 x 7; whole planes several per block and bands of one
plane (a small shared-memory target forces them, including a last band of fewer rows); every
dtype -- against the float64 reference, outputs poisoned.  The GPU runs are in
test_gpu_depthwise.py."""

import numpy as np
import pytest

from cupyconv import reference
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.verify import random_array, rel_error, tolerance
from cupyconv._depthwise import bands, launch

from host_route import HostArray, case_id, host_empty, host_problem

# (dtype, n, c, mult, spatial, kernel, options)
CASES = [
    ("float32", 2, 3, 1, (7, 7), 3, dict(padding=1)),
    ("float32", 2, 3, 1, (14, 14), 3, dict(stride=2, padding=1)),
    ("float32", 1, 2, 1, (9, 13), 5, dict(padding=2)),
    ("float32", 1, 2, 1, (11, 10), 5, dict(stride=2, padding=2)),
    ("float32", 1, 2, 1, (10, 9), 7, dict(padding=3)),
    ("float32", 1, 2, 1, (13, 12), 7, dict(stride=2, padding=(3, 2))),
    ("float32", 1, 3, 1, (8, 9), (1, 3), dict(padding=(0, 1))),
    ("float32", 1, 2, 1, (9, 8), (2, 5), dict(padding=[(1, 0), (3, 1)])),
    ("float32", 1, 2, 1, (8, 11), 3, dict(padding=0)),
    ("float32", 1, 2, 1, (9, 9), 3, dict(stride=2, padding=[(2, 0), (0, 2)])),
    ("float32", 1, 2, 2, (7, 9), 3, dict(padding=1)),                 # multiplier (forward only)
    ("float32", 1, 3, 1, (6, 7), 3, dict(padding=3)),                 # pad > K - 1
    # stride 2, backward-data by phases: offsets K - 1 - P of each parity, negative ones
    ("float32", 1, 2, 1, (12, 13), 3, dict(stride=2, padding=0)),
    ("float32", 1, 2, 1, (11, 12), 3, dict(stride=2, padding=[(3, 2), (2, 3)])),
    ("float32", 1, 2, 1, (12, 11), (2, 5), dict(stride=2, padding=[(1, 0), (1, 2)])),
    ("float32", 1, 2, 1, (15, 14), 7, dict(stride=2, padding=(0, 1))),
    ("float16", 2, 2, 1, (7, 7), 3, dict(padding=1)),
    ("bfloat16", 1, 2, 1, (10, 10), 5, dict(stride=2, padding=2)),
    ("float64", 1, 2, 1, (9, 7), 3, dict(stride=2, padding=1)),
]


@pytest.fixture(params=["planes", "bands"])
def band_route(request, host_route, bands_preferred, monkeypatch):
    """The host route with the band kernel preferred wherever it applies: whole planes at the
    default shared-memory target, or ("bands") bands of a few rows."""
    if request.param == "bands":
        plan = bands.band_plan

        def banded(geom, transposed, **kw):
            """Bands of 3 rows (1 on planes of at most 3 rows): the smallest shared-memory target
            that gives them."""
            first = plan(geom, transposed, smem_target=1)
            if first is None:
                return None
            for target in range(16, bands.SMEM_LIMIT, 16):
                q = plan(geom, transposed, smem_target=target)
                if q.band_rows >= 3 or q.bands == 1:
                    return q if q.bands > 1 else first
            return first
        monkeypatch.setattr(bands, "band_plan", banded)
    return host_route


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_band_kernel_matches_reference(case, band_route):
    g, x, w, b, dy, opts = host_problem(case)
    plan = bands.band_plan(g, False)
    assert plan is not None
    y = host_empty(g.output_shape, g.dtype)
    launch.run_depthwise(g, x, w, b, y)
    assert ("depthwise_bands", (plan.cs, 1)) in band_route.kernels
    ref = reference.conv(x, w, b, **opts)
    assert rel_error(y, ref) <= tolerance(g.dtype, ref), "forward"

    if g.out_channels != g.in_channels:
        assert bands.band_plan(g, True) is None  # a dx plane would gather several dy planes
        return
    band_route.kernels.clear()
    dx = host_empty(g.input_shape, g.dtype)
    launch.run_depthwise_backward_data(g, dy, w, dx)
    assert ("depthwise_bands", (1, g.stride[0])) in band_route.kernels
    assert band_route.passes == ["NCHW"] * len(band_route.passes)  # no channels-last detour
    ref = reference.conv_backward_data(dy, w, g.input_shape, **opts)
    assert rel_error(dx, ref) <= tolerance(g.dtype, ref), "backward-data"


@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[12]], ids=case_id)
def test_band_kernel_reads_unaligned_sources(case, band_route):
    """x and dy one element past a 16-byte boundary: the kernel reads them element by element
    instead of in 16-byte vectors."""
    g, x, w, b, dy, opts = host_problem(case, x_offset=1)
    dyu = host_empty(dy.shape, g.dtype, 1)
    dyu[...] = dy
    y = host_empty(g.output_shape, g.dtype, 1)
    launch.run_depthwise(g, x, w, b, y)
    ref = reference.conv(x, w, b, **opts)
    assert rel_error(y, ref) <= tolerance(g.dtype, ref), "forward"
    dx = host_empty(g.input_shape, g.dtype)
    launch.run_depthwise_backward_data(g, dyu, w, dx)
    ref = reference.conv_backward_data(dy, w, g.input_shape, **opts)
    assert rel_error(dx, ref) <= tolerance(g.dtype, ref), "backward-data"
    assert band_route.kernels and all(t == "depthwise_bands" for t, _ in band_route.kernels)


@pytest.mark.parametrize("extra", [(1, 0), (1, 1)])
def test_band_kernel_backward_data_output_padding(extra, band_route):
    """Stride-2 backward-data onto an input one row / column larger than the forward output
    needs (the rows and columns no dy element reaches are zero)."""
    n, c = 2, 3
    g = ConvGeometry.from_shapes((n, c, 13 + extra[0], 13 + extra[1]), (c, 1, 3, 3), groups=c,
                                 stride=2, padding=1, dtype="float32")
    assert g.out_spatial == (7, 7)
    rng = np.random.default_rng(7)
    w, dy = (random_array(rng, s, "float32").view(HostArray) for s in (g.weight_shape, g.output_shape))
    dx = host_empty(g.input_shape, "float32")
    launch.run_depthwise_backward_data(g, dy, w, dx)
    assert ("depthwise_bands", (1, 2)) in band_route.kernels
    ref = reference.conv_backward_data(dy, w, g.input_shape, stride=2, padding=1, groups=c)
    assert rel_error(dx, ref) <= tolerance("float32", ref)


def test_band_plan_limits():
    """What the band kernel does not take, and the split it makes of small and large planes."""
    def geom(spatial, k=3, **o):
        return ConvGeometry.from_shapes((2, 4, *spatial), (4, 1, k, k), groups=4,
                                        dtype="float32", **o)
    assert bands.band_plan(geom((8, 8), dilation=2), False) is None
    assert bands.band_plan(geom((12, 12), k=9), False) is None
    assert bands.band_plan(geom((8, 8), stride=3), False) is None
    nhwc = ConvGeometry.from_shapes((2, 8, 8, 4), (4, 3, 3, 1), groups=4, layout="NHWC",
                                    dtype="float32")
    assert bands.band_plan(nhwc, False) is None
    def tall(rows):
        return ConvGeometry.from_shapes((1, 1, rows, 32), (1, 1, 3, 3), groups=1, stride=2,
                                        padding=1, dtype="float32")
    # x and dx planes of 2^32 elements: beyond the kernel's 32-bit plane indices; 2^30 is taken
    assert bands.band_plan(tall(2 ** 27), False) is None
    assert bands.band_plan(tall(2 ** 27), True) is None
    assert bands.band_plan(tall(2 ** 25), False) and bands.band_plan(tall(2 ** 25), True)
    small = bands.band_plan(geom((7, 7), padding=1), False)
    assert small.bands == 1 and small.band_rows == 7 and small.planes_per_block == 8
    # backward-data by phases: bands of an even number of rows (row pairs stay aligned)
    phased = bands.band_plan(geom((224, 224), stride=2, padding=1), True)
    assert phased.up == 2 and phased.bands > 1 and phased.band_rows % 2 == 0
    assert phased.item_rows == phased.band_rows // 2 + 1
    large = bands.band_plan(geom((224, 224), padding=1), False)
    assert large.bands > 1 and large.planes_per_block == 1
    assert large.band_rows * large.bands >= 224 > (large.bands - 1) * large.band_rows
    assert large.smem <= bands.SMEM_TARGET
