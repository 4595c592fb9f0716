"""Implicit-GEMM problems split into row slabs (more rows than one launch indexes in 32 bits) on
the GPU: the limit is lowered so that small problems of the shared case grid split into many
slabs (whole images, runs of rows, single rows), in all three passes, both layouts, against the
float64 reference.  The real > 2^31-pixel problems are in test_gpu_trust.py (slow)."""

import pytest

import cupyconv
from cupyconv import reference
from cupyconv._gemm import launch as _gemm_launch
from cupyconv._core.verify import poison, random_array, rel_error, tolerance

from gpu_cases import CASES, LAYOUTS, case_id, rng_for, shapes

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("limit", [5, 37])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_row_slabs_give_the_whole_problems_result(case, layout, dtype, limit, monkeypatch):
    import cupy

    monkeypatch.setattr(_gemm_launch, "MAX_GEMM_ROWS", limit)
    rng = rng_for("slabs", case_id(case), layout, dtype, limit)
    xs, ws = shapes(case, layout)
    opts = dict(case["opts"], layout=layout)
    ys = cupyconv.output_shape(xs, ws, **opts)
    xh, wh, dyh = (random_array(rng, s, dtype) for s in (xs, ws, ys))
    x, w, dy = cupy.asarray(xh), cupy.asarray(wh), cupy.asarray(dyh)
    bh = random_array(rng, (ws[0],), dtype)

    y = poison(cupy.empty(ys, dtype))
    cupyconv.conv(x, w, cupy.asarray(bh), method="implicit_gemm", out=y, **opts)
    ref = reference.conv(xh, wh, bh, **opts)
    assert rel_error(y, ref) <= tolerance(dtype, ref), "forward"

    dx = poison(cupy.empty(xs, dtype))
    cupyconv.conv_backward_data(dy, w, xs, method="implicit_gemm", out=dx, **opts)
    ref = reference.conv_backward_data(dyh, wh, xs, **opts)
    assert rel_error(dx, ref) <= tolerance(dtype, ref), "backward-data"

    dw = poison(cupy.empty(ws, dtype))
    cupyconv.conv_backward_weight(x, dy, ws, method="implicit_gemm", out=dw, **opts)
    ref = reference.conv_backward_weight(xh, dyh, ws, **opts)
    assert rel_error(dw, ref) <= tolerance(dtype, ref), "backward-weight"
