"""The option grid shared by the GPU tests: odd sizes, every padding form, stride > kernel,
dilation with stride, groups (incl. depthwise and channel multipliers), batch 1, 1-/2-/3-d."""

import zlib

import numpy as np

# n, c, k (output channels), spatial, kernel, options
CASES = [
    dict(n=2, c=3, k=4, sp=(17,), ker=(3,), opts=dict(padding=1)),
    dict(n=1, c=4, k=6, sp=(31,), ker=(5,), opts=dict(stride=3, padding=[(2, 0)], dilation=2, groups=2)),
    dict(n=3, c=5, k=5, sp=(9,), ker=(4,), opts=dict(stride=2, padding="same", groups=5)),
    dict(n=2, c=3, k=8, sp=(13, 11), ker=(3, 3), opts=dict(padding=1)),
    dict(n=1, c=6, k=4, sp=(12, 15), ker=(3, 5),
         opts=dict(stride=(2, 1), padding=[(1, 0), (2, 3)], dilation=(1, 2), groups=2)),
    dict(n=2, c=8, k=8, sp=(10, 9), ker=(3, 3), opts=dict(stride=2, padding="same", groups=8)),
    dict(n=1, c=4, k=12, sp=(9, 9), ker=(2, 2), opts=dict(stride=2, padding="same_lower", groups=4)),
    dict(n=2, c=3, k=5, sp=(7, 8), ker=(1, 1), opts=dict()),
    dict(n=1, c=2, k=3, sp=(5, 6), ker=(5, 6), opts=dict(padding="valid")),
    dict(n=2, c=16, k=7, sp=(8, 8), ker=(3, 3), opts=dict(stride=3, padding=2, dilation=3)),
    dict(n=1, c=3, k=2, sp=(11, 13), ker=(2, 2), opts=dict(stride=4)),
    dict(n=1, c=200, k=3, sp=(6, 5), ker=(3, 3), opts=dict(padding=(1, 0))),
    dict(n=1, c=2, k=3, sp=(5, 6, 7), ker=(3, 3, 3), opts=dict(padding=1)),
    dict(n=2, c=4, k=4, sp=(6, 7, 5), ker=(2, 3, 1),
         opts=dict(stride=(1, 2, 2), padding="same", dilation=(2, 1, 1), groups=2)),
    dict(n=1, c=3, k=6, sp=(4, 9, 8), ker=(3, 1, 3),
         opts=dict(padding=[(0, 2), (1, 1), (2, 0)], groups=3)),
]
LAYOUTS = ("NCHW", "NHWC")
DTYPES = ("float16", "float32", "float64")
# bfloat16 runs float16's code paths (2-byte storage, float32 accumulation), so a representative
# part of the grid covers it rather than a fourth full dtype: 1-, 2- and 3-d, groups with
# dilation and asymmetric padding, depthwise with stride, a channel multiplier, a long reduction.
BF16_CASES = [CASES[i] for i in (0, 4, 5, 6, 11, 13)]
ALL_DTYPES = DTYPES + ("bfloat16",)


def case_id(case):
    o = case["opts"]
    return (f"{len(case['sp'])}d-c{case['c']}k{case['k']}-{'x'.join(map(str, case['ker']))}"
            f"-s{o.get('stride', 1)}-p{o.get('padding', 0)}-d{o.get('dilation', 1)}-g{o.get('groups', 1)}"
            ).replace(" ", "")


def dtypes_for(case, bf16_cases=BF16_CASES) -> tuple[str, ...]:
    """The dtypes a grid test runs ``case`` in: DTYPES, and bfloat16 too for ``bf16_cases``."""
    return ALL_DTYPES if case in bf16_cases else DTYPES


def with_dtypes(cases, bf16_cases=BF16_CASES, ids=case_id):
    """``pytest.param(case, dtype)`` for every case of ``cases`` in each of its dtypes."""
    import pytest

    return [pytest.param(c, d, id=f"{ids(c)}-{d}") for c in cases for d in dtypes_for(c, bf16_cases)]


def shapes(case, layout):
    g = case["opts"].get("groups", 1)
    if layout == "NHWC":
        return (case["n"], *case["sp"], case["c"]), (case["k"], *case["ker"], case["c"] // g)
    return (case["n"], case["c"], *case["sp"]), (case["k"], case["c"] // g, *case["ker"])


def rng_for(*parts):
    """A generator seeded from the test's identity: fresh data per test, reproducible per run."""
    return np.random.default_rng(zlib.crc32(repr(parts).encode()))


def assert_adjoint(x, w, dy, opts, rel=1e-10):
    """<conv(x, w), dy> == <x, conv_backward_data(dy, w)> == <w, conv_backward_weight(x, dy)>
    (float64 operands): the backward passes are the forward's adjoints."""
    import cupy
    import pytest

    import cupyconv

    lhs = float(cupy.vdot(cupyconv.conv(x, w, **opts), dy))
    mid = float(cupy.vdot(x, cupyconv.conv_backward_data(dy, w, x.shape, **opts)))
    rhs = float(cupy.vdot(w, cupyconv.conv_backward_weight(x, dy, w.shape, **opts)))
    assert mid == pytest.approx(lhs, rel=rel, abs=rel)
    assert rhs == pytest.approx(lhs, rel=rel, abs=rel)


def assert_three_passes(x, w, dy, hosts, opts, dtype, note=""):
    """Forward, backward-data and backward-weight of (x, w, dy) against the float64 reference on
    their host copies ``hosts`` = (xh, wh, dyh), each within ``tolerance(dtype)``."""
    from cupyconv import reference
    from cupyconv._core.verify import rel_error, tolerance

    import cupyconv

    xh, wh, dyh = hosts
    for got, ref in ((cupyconv.conv(x, w, **opts), reference.conv(xh, wh, None, **opts)),
                     (cupyconv.conv_backward_data(dy, w, xh.shape, **opts),
                      reference.conv_backward_data(dyh, wh, xh.shape, **opts)),
                     (cupyconv.conv_backward_weight(x, dy, wh.shape, **opts),
                      reference.conv_backward_weight(xh, dyh, wh.shape, **opts))):
        assert rel_error(got, ref) <= tolerance(dtype, ref), note
