"""Where the implicit-GEMM epilogue and its split-K reduction put rows (gemm/out_map.cuh), on the
GPU against the float64 reference: backward-data's stride phases of channels-last dx written
straight into their rows (1-d, 2-d, 3-d unstrided in depth; channels-first dx and 3-d phases
strided in depth and height through a buffer), with split-K forced off and on, bias (conv_transpose) and the rows no tap reaches; and a
channels-first output of one pixel per image under split-K (its channel stride is 1, which must
not be taken for a channels-last order).  Every output is poisoned before the call."""

import numpy as np
import pytest

import cupyconv
from cupyconv import reference
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import gemm_tiles
from cupyconv._core.precision import gemm_math
from cupyconv._core.verify import poison, random_array, rel_error, tolerance
from cupyconv._gemm.backward import phase_plan
from cupyconv._gemm.launch import forced_plan, record_plans
from cupyconv._gemm.plans import GemmPlan

from gpu_cases import rng_for

pytestmark = pytest.mark.gpu

# input spatial, kernel, stride, padding, groups
CASES = [
    ((13, 12), (3, 3), (2, 2), 1, 1),
    ((9, 11), (3, 2), (3, 2), (2, 0), 2),
    ((8, 8), (1, 1), (3, 3), 0, 1),            # stride > kernel: rows no tap reaches
    ((15,), (4,), (2,), 1, 4),
    ((5, 6, 7), (3, 3, 3), (1, 2, 2), 1, 1),   # 3-d in place
    ((5, 6, 7), (3, 3, 3), (2, 2, 1), 1, 1),   # 3-d through a buffer
]


def case_id(case):
    sp, ker, st, pad, g = case
    return f"{'x'.join(map(str, sp))}-k{'x'.join(map(str, ker))}-s{'x'.join(map(str, st))}-g{g}"


def _plan(dtype: str, splits: int):
    """A plan forcing ``splits`` (with the first tile of the main loop the device runs ``dtype``
    on)."""
    import cupy

    math = gemm_math(dtype, "exact", cupy.cuda.Device().id)
    return GemmPlan(gemm_tiles(dtype, math)[0], splits, 0.0, math)


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_backward_data_phases_land_on_their_rows(case, layout, dtype, splits):
    import cupy

    sp, ker, stride, pad, g = case
    c, k, n = 4 * g, 8 * g, 2
    cl = layout == "NHWC"
    xs = (n, *sp, c) if cl else (n, c, *sp)
    ws = (k, *ker, c // g) if cl else (k, c // g, *ker)
    opts = dict(stride=stride, padding=pad, groups=g, layout=layout)
    geom = ConvGeometry.from_shapes(xs, ws, dtype=dtype, **opts)
    plan = phase_plan(geom)
    assert len(plan.phases) > 1 or plan.zero_fill
    assert [ph.in_place for ph in plan.phases] == [cl and not _d_and_h_strided(case)] * len(plan.phases)
    ys = cupyconv.output_shape(xs, ws, **opts)
    rng = rng_for("phase-rows", case_id(case), layout, dtype)
    dyh, wh, bh = (random_array(rng, s, dtype) for s in (ys, ws, (c,)))
    dy, w, b = (cupy.asarray(a) for a in (dyh, wh, bh))
    f64 = lambda a: a.astype(np.float64)  # noqa: E731
    with forced_plan(_plan(dtype, splits)), record_plans() as log:
        dx = poison(cupy.empty(xs, dtype))
        cupyconv.conv_backward_data(dy, w, xs, method="implicit_gemm", out=dx, **opts)
        # conv_transpose: the same phases with a bias in their epilogues (where they cover dx)
        yt = poison(cupy.empty(xs, dtype))
        cupyconv.conv_transpose(dy, w, b, stride=stride, padding=pad, groups=g, layout=layout,
                                output_padding=_output_padding(xs, ys, ker, stride, pad, cl),
                                method="implicit_gemm", out=yt)
    assert {p.splits for _, _, p in log} == {splits}
    ref = reference.conv_backward_data(f64(dyh), f64(wh), xs, **opts)
    err = rel_error(dx, ref)
    assert err <= tolerance(dtype, ref), f"backward-data: {err:.3e}"
    bshape = (1,) * (len(xs) - 1) + (c,) if cl else (1, c) + (1,) * len(sp)
    ref_t = ref + f64(bh).reshape(bshape)
    err = rel_error(yt, ref_t)
    assert err <= tolerance(dtype, ref_t), f"conv_transpose: {err:.3e}"


def _d_and_h_strided(case) -> bool:
    sp, _, stride, _, _ = case
    return len(sp) == 3 and stride[0] > 1 and stride[1] > 1


def _output_padding(xs, ys, ker, stride, pad, cl):
    """conv_transpose's output_padding that gives back the forward input's spatial size (unit
    dilation, the same padding on both sides of a dim)."""
    sp_x, sp_y = (xs[1:-1], ys[1:-1]) if cl else (xs[2:], ys[2:])
    pads = pad if isinstance(pad, tuple) else (pad,) * len(sp_x)
    return tuple(size - ((o - 1) * s - 2 * p + kk)
                 for size, o, kk, s, p in zip(sp_x, sp_y, ker, stride, pads))


@pytest.mark.parametrize("splits", [1, 3])
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_one_pixel_channels_first_output_under_split_k(dtype, splits):
    """(N, K, 1, 1) channels-first y: channel stride 1 like a channels-last one, but the split-K
    parts are written in channels-first (m-fastest) order and must be read back in it."""
    import cupy

    rng = rng_for("one-pixel", dtype, splits)
    xh, wh, bh = (random_array(rng, s, dtype) for s in ((5, 24, 7, 7), (12, 24, 7, 7), (12,)))
    x, w, b = (cupy.asarray(a) for a in (xh, wh, bh))
    with forced_plan(_plan(dtype, splits)), record_plans() as log:
        y = poison(cupy.empty((5, 12, 1, 1), dtype))
        cupyconv.conv(x, w, b, method="implicit_gemm", out=y)
    assert {p.splits for _, _, p in log} == {splits}
    ref = reference.conv(xh.astype(np.float64), wh.astype(np.float64), bh.astype(np.float64))
    err = rel_error(y, ref)
    assert err <= tolerance(dtype, ref), f"{err:.3e}"
