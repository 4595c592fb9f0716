"""Seeded random fuzz of every pass against the float64 reference (fuzz_problems.py).

``CUPYCONV_FUZZ_SEED`` (default 20240607) seeds the run, ``CUPYCONV_FUZZ_COUNT`` (default 1000)
sets the number of problems; they are split over ``SHARDS`` pytest cases so that pytest-xdist
spreads them.  Each problem draws: forward / backward-data / backward-weight / transpose /
separable, 1-3 spatial dims, NCHW / NHWC, dense / grouped / depthwise (channel multipliers
included), stride, dilation, every padding form, every method of its pass, float32 / float64 /
float16 / bfloat16, operands as random views (negative strides, permuted layouts, steps, offsets, slices of
larger buffers whose unused memory holds NaN), strided or reversed bias, ``out=`` given (NaN
poisoned, sometimes at an odd offset) or not.  A failure prints the whole problem and how to
reproduce it from (seed, index).  A problem is skipped only where the library refuses it with a
documented ValueError (fuzz_problems.SKIP_REASONS); at least 90 % must run.
"""

import math
import os

import pytest

import fuzz_problems as fz

pytestmark = pytest.mark.gpu

SEED = int(os.environ.get("CUPYCONV_FUZZ_SEED", "20240607"))
COUNT = int(os.environ.get("CUPYCONV_FUZZ_COUNT", "1000"))
SHARDS = 20


@pytest.mark.parametrize("shard", range(SHARDS))
def test_fuzz(shard):
    import cupy

    import cupyconv

    per = math.ceil(COUNT / SHARDS)
    indices = range(shard * per, min(COUNT, (shard + 1) * per))
    failures, skipped, ran = [], [], 0
    for i in indices:
        problem = fz.generate(SEED, i)
        result = fz.run_problem(problem, cupy, cupyconv)
        if result[0] == "ran":
            ran += 1
        elif result[0] == "skipped":
            skipped.append(f"index {i}: {result[1]}")
        else:
            failures.append(result[1])
    total = len(indices)
    assert not failures, (f"{len(failures)} of {total} fuzz problems failed (seed {SEED}, shard "
                          f"{shard}):\n\n" + "\n\n".join(failures[:8]))
    assert ran >= 0.9 * total, (f"only {ran} of {total} problems ran; skipped:\n"
                                + "\n".join(skipped))
