"""The channels-first plane kernels (depthwise_plane.cu) on the CPU, through the launch path
(run_depthwise, run_depthwise_backward_data, run_depthwise_backward_weight under the
``host_route`` fixture): forward with bias, backward-data at unit stride (the forward kernel on
the flipped filter), backward-weight with its fixed-order chunk sum; stride 1 and 2 with every
offset E; 16-byte aligned and unaligned input rows; vector and buffered stores; a channel
multiplier; planes of several strips -- against the float64 reference, outputs and scratch
poisoned.  The GPU runs are in test_gpu_depthwise.py."""

import pytest

from cupyconv import reference
from cupyconv._core.verify import rel_error, tolerance
from cupyconv._depthwise import launch
from cupyconv._depthwise.planes import backward_data_twin, plane_plan, plane_wgrad_plan

from host_route import case_id, host_empty, host_problem

# (dtype, n, c, mult, spatial, kernel, options): which walk, offset and store each exercises
CASES = [
    ("float32", 2, 3, 1, (9, 12), 3, dict(stride=2, padding=1)),      # E 3, aligned rows, OW 6
    ("float32", 1, 4, 1, (16, 16), 3, dict(stride=2, padding=1)),     # vector stores (OW 8)
    ("float32", 2, 2, 1, (11, 13), 5, dict(stride=2, padding=2)),     # E 2, unaligned rows
    ("float32", 1, 2, 1, (13, 20), 7, dict(stride=2, padding=3)),     # E 1, the runtime row loop
    ("float32", 1, 3, 1, (10, 17), 3, dict(stride=2, padding=0)),     # E 0
    ("float32", 1, 2, 2, (9, 12), 3, dict(stride=2, padding=[(2, 0), (1, 2)])),  # multiplier 2
    ("float32", 1, 1, 1, (5, 300), 3, dict(stride=2, padding=1)),     # two strips (OW 150)
    ("float16", 1, 3, 1, (9, 16), 3, dict(stride=2, padding=1)),
    ("bfloat16", 1, 2, 1, (8, 12), 5, dict(stride=2, padding=2)),
    ("float64", 1, 2, 1, (9, 11), 3, dict(stride=2, padding=1)),
    # stride 1 (the same walk): strips shifted for aligned windows, square and generic filters
    ("float32", 2, 3, 1, (7, 10), 3, dict(padding=1)),
    ("float32", 1, 2, 1, (6, 9), (2, 5), dict(padding=(1, 3))),
    ("float16", 1, 2, 1, (5, 12), 5, dict(padding=2)),
    ("float32", 2, 2, 1, (9, 14), 5, dict(padding=[(1, 3), (2, 2)])),
    ("float32", 1, 2, 1, (9, 16), 3, dict(padding=[(0, 2), (2, 0)])),  # twin pads (2, 0), (0, 2)
    ("float64", 1, 3, 1, (6, 7), (3, 3), dict(padding=(0, 1))),
]

# (the band kernel would take these problems over)
pytestmark = pytest.mark.usefixtures("no_bands")


def _plane_variant(g, wgrad=False):
    plan = plane_wgrad_plan(g)[0] if wgrad else plane_plan(g)
    return ("depthwise_plane_wgrad" if wgrad else "depthwise_plane",
            plan.kernel(g.dtype, wgrad)[1])


def _check_backward_data(g, w, dy, opts, host_route):
    """Backward-data where it runs on the plane kernel (unit stride, no multiplier)."""
    twin = backward_data_twin(g)
    assert (twin is not None) == (g.stride == (1, 1) and g.out_channels == g.in_channels)
    if twin is None:
        return
    assert twin.output_shape == g.input_shape
    dx = host_empty(g.input_shape, g.dtype)
    launch.run_depthwise_backward_data(g, dy, w, dx)
    assert _plane_variant(twin) in host_route.kernels
    ref = reference.conv_backward_data(dy, w, g.input_shape, **opts)
    assert rel_error(dx, ref) <= tolerance(g.dtype, ref), "backward-data"


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_plane_kernels_match_reference(case, host_route):
    g, x, w, b, dy, opts = host_problem(case)
    assert plane_plan(g) is not None
    y = host_empty(g.output_shape, g.dtype)
    launch.run_depthwise(g, x, w, b, y)
    assert _plane_variant(g) in host_route.kernels
    ref = reference.conv(x, w, b, **opts)
    assert rel_error(y, ref) <= tolerance(g.dtype, ref), "forward"
    _check_backward_data(g, w, dy, opts, host_route)
    # backward-weight: 3x3 and 5x5
    has_wgrad = g.kernel in ((3, 3), (5, 5))
    assert (plane_wgrad_plan(g) is not None) == has_wgrad
    if not has_wgrad:
        return
    dw = host_empty(g.weight_shape, g.dtype)
    launch.run_depthwise_backward_weight(g, x, dy, dw)
    assert _plane_variant(g, wgrad=True) in host_route.kernels
    ref = reference.conv_backward_weight(x, dy, g.weight_shape, **opts)
    assert rel_error(dw, ref) <= tolerance(g.dtype, ref), "backward-weight"


@pytest.mark.parametrize("case", [CASES[1], CASES[3], CASES[10]], ids=case_id)
def test_plane_kernels_read_unaligned_views(case, host_route):
    """x one element past an aligned base (rows not 16-byte aligned: element loads) and y one
    element past one (buffered stores), with the strip and window offsets of the aligned runs."""
    g, x, w, b, dy, opts = host_problem(case, x_offset=1)
    y = host_empty(g.output_shape, g.dtype, 1)
    launch.run_depthwise(g, x, w, b, y)
    assert _plane_variant(g) in host_route.kernels
    ref = reference.conv(x, w, b, **opts)
    assert rel_error(y, ref) <= tolerance(g.dtype, ref)
    if plane_wgrad_plan(g) is not None:
        dw = host_empty(g.weight_shape, g.dtype)
        launch.run_depthwise_backward_weight(g, x, dy, dw)
        ref = reference.conv_backward_weight(x, dy, g.weight_shape, **opts)
        assert rel_error(dw, ref) <= tolerance(g.dtype, ref)


@pytest.mark.parametrize("case", [CASES[0], CASES[5], CASES[10], CASES[12]], ids=case_id)
def test_plane_kernels_nonfinite_masks(case, host_route):
    """One NaN or inf in x at a corner, an edge and an interior pixel reaches exactly the outputs
    and weight-gradient taps the float64 reference gives it (backward-weight once multiplied the
    zero dy of positions past the output's edge by x: 0 * NaN, issue 45)."""
    import numpy as np

    g, x0, w, b, dy, opts = host_problem(case)
    w = (np.sign(w) * (0.25 + np.abs(w))).astype(w.dtype)
    h, wd = g.spatial
    for pos in ((0, 0), (0, wd // 2), (h // 2, wd // 2), (h - 1, wd - 1)):
        for value in (np.nan, np.inf):
            x = x0.copy()
            x[(0, 0) + pos] = value
            runs = [("forward", launch.run_depthwise, (x, w, b), g.output_shape,
                     reference.conv(x, w, b, **opts))]
            if plane_wgrad_plan(g) is not None:
                runs.append(("backward-weight", launch.run_depthwise_backward_weight, (x, dy),
                             g.weight_shape,
                             reference.conv_backward_weight(x, dy, g.weight_shape, **opts)))
            for what, run, args, shape, ref in runs:
                out = host_empty(shape, g.dtype)
                run(g, *args, out)
                got, want = np.asarray(out, np.float64), np.asarray(ref, np.float64)
                assert np.array_equal(np.isnan(got), np.isnan(want)), (what, value, pos)
                assert np.array_equal(np.isinf(got), np.isinf(want)), (what, value, pos)
