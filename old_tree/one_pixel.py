# one-off: the (N, K, 1, 1) channels-first split-K case on the code before 38e9c23
import sys
import numpy as np, cupy
import cupyconv
print(cupyconv.__file__)
from cupyconv import reference
from cupyconv._core.kernels import gemm_tiles
from cupyconv._core.precision import gemm_math
from cupyconv._gemm.launch import GemmPlan, forced_plan
for dtype in ("float32", "float16"):
    for splits in (1, 3):
        rng = np.random.default_rng(0)
        xh = rng.uniform(-1, 1, (5, 24, 7, 7)).astype(dtype); wh = rng.uniform(-1, 1, (12, 24, 7, 7)).astype(dtype)
        math = gemm_math(dtype, "exact", 0)
        with forced_plan(GemmPlan(gemm_tiles(dtype, math)[0], splits, 0.0, math)):
            y = cupyconv.conv(cupy.asarray(xh), cupy.asarray(wh), method="implicit_gemm")
        ref = reference.conv(xh.astype(np.float64), wh.astype(np.float64))
        print(dtype, splits, float(np.linalg.norm(cupy.asnumpy(y).astype(np.float64) - ref) / np.linalg.norm(ref)))
