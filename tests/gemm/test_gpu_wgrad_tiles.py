"""Backward-weight's tiles on the Hopper loop (compute capability 9.0, 16-bit): where both operands
come in 16-byte chunks the multistage wgmma loop runs, and its MN-major im2col operand rules out
the 64 x 64 tile (``kernels.wgmma_feeds``); where they do not (3 input channels) the
register-staged loop runs any tile and the plan is unconstrained.  Results against the float64
reference either way."""

import numpy as np
import pytest

from cupyconv._core.verify import random_array, rel_error, tolerance

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _hopper():
    import cupy

    if cupy.cuda.runtime.is_hip or cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the Hopper loop's tile rule (compute capability 9.0)")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("cin,cout,kernel,size", [(64, 64, 3, 20), (3, 64, 7, 40), (512, 256, 3, 9)])
def test_backward_weight_tile_follows_the_loop_that_runs(dtype, cin, cout, kernel, size):
    import cupy

    import cupyconv
    from cupyconv import reference
    from cupyconv._core.caches import clear_caches
    from cupyconv._core.kernels import MATH_WGMMA, wgmma_feeds
    from cupyconv._gemm.launch import record_plans
    from cupyconv._gemm.plans import plan_gemm

    rng = np.random.default_rng(7)
    x = cupy.asarray(random_array(rng, (4, size, size, cin), dtype))
    out = size + 2 * (kernel // 2) - kernel + 1
    dy = cupy.asarray(random_array(rng, (4, out, out, cout), dtype))
    shape = (cout, kernel, kernel, cin)
    clear_caches()
    with record_plans() as log:
        dw = cupyconv.conv_backward_weight(x, dy, shape, padding=kernel // 2, layout="NHWC")
    want = reference.conv_backward_weight(x.get(), dy.get(), shape, padding=kernel // 2,
                                          layout="NHWC")
    assert rel_error(dw, want) <= tolerance(dtype, want)
    plans = [(gemm, plan) for kernel_name, gemm, plan in log if kernel_name == "conv_wgrad"]
    assert len(plans) == 1
    (m, n, k, batch), plan = plans[0]
    assert plan.math == MATH_WGMMA
    if cin % 8 == 0:  # 16-byte chunks: the multistage loop, fed only by some tiles
        assert wgmma_feeds(plan.tile, MATH_WGMMA, False)
    else:  # the register-staged loop: every tile
        assert plan.tile == plan_gemm(dtype, m, n, k, batch, 0, "exact").tile
