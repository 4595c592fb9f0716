"""The few-channel column route (``_gemm/tma_columns.py``) on an sm_90 GPU, through cupyconv's
public calls: forward, backward-data and backward-weight of channels-last 16-bit layers whose
channels are not whole 16-byte chunks (3-channel stems, one- and four-channel layers), against the
float64 reference into NaN-poisoned outputs, over strides (also per axis and past the kernel),
paddings (asymmetric too), dilation, 1-d and 3-d problems, batch chunks (a small chunk limit),
views of x, a replayed second call with new arrays, and NaN/inf planted in every operand reaching
exactly the outputs PyTorch gives them."""

import numpy as np
import pytest

from cupyconv._core.verify import random_array, rel_error, tolerance

pytestmark = pytest.mark.gpu

DTYPES = ("float16", "bfloat16")
# (x shape (N, *spatial, C), K, kernel, options): every one has at least half a wave of
# 128 x 128 output tiles on an H200 (66) and enough pixels for backward-weight's split-K to
# fill a wave, so that the route takes all three passes
CASES = [
    ((4, 97, 101, 3), 64, (7, 7), dict(stride=2, padding=3)),       # ResNet-50's stem
    ((8, 95, 90, 3), 32, (3, 3), dict(stride=2, padding=1)),        # EfficientNet-B0's
    ((9, 190, 170, 3), 96, (4, 4), dict(stride=4)),                 # ConvNeXt-T's
    ((6, 60, 70, 1), 16, (5, 5), dict(padding=2)),                  # one channel
    ((8, 50, 61, 4), 40, (3, 3), dict(padding=1, dilation=2)),      # dilation
    ((8, 91, 60, 5), 24, (3, 3), dict(stride=(2, 1), padding=((2, 0), (0, 1)))),
    ((10, 130, 130, 3), 16, (2, 2), dict(stride=3)),                # stride past the kernel
    ((4, 12, 20, 20, 3), 16, (3, 3, 3), dict(padding=1)),           # 3-d
    ((40, 2400, 1), 32, (9,), dict(stride=2, padding=4)),           # 1-d
]


@pytest.fixture(autouse=True)
def _hopper():
    import cupy

    if cupy.cuda.runtime.is_hip or cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the TMA kernel needs an NVIDIA GPU of compute capability 9.0")
    pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings (the cuda13/cuda12 extra)")


@pytest.fixture
def routed(monkeypatch):
    """The passes ("forward", "backward_data", "backward_weight") the column route ran, its
    forward taken wherever it applies (not only where its estimate wins: the route is what
    these tests check; test_the_forward_rule_on_the_stems checks the rule)."""
    from cupyconv._core.caches import clear_caches
    from cupyconv._gemm import forward, tma_columns

    clear_caches()
    monkeypatch.setattr(forward, "columns_pay", tma_columns.applies)
    ran = []
    for name in ("forward", "backward_data", "backward_weight"):
        real = getattr(tma_columns, name)

        def spy(*args, _real=real, _name=name):
            took = _real(*args)
            if took:
                ran.append(_name)
            return took

        monkeypatch.setattr(tma_columns, name, spy)
    yield ran
    clear_caches()


def _problem(case, dtype, seed):
    from cupyconv._core.geometry import ConvGeometry

    x_shape, k, kernel, opts = case
    rng = np.random.default_rng(seed)
    xh = random_array(rng, x_shape, dtype)
    wh = random_array(rng, (k, *kernel, x_shape[-1]), dtype)
    y_shape = ConvGeometry.from_shapes(x_shape, wh.shape, layout="NHWC", dtype=dtype,
                                       **opts).output_shape
    dyh = random_array(rng, y_shape, dtype)
    return xh, wh, dyh, opts


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])) + f"-k{c[1]}")
def test_three_passes_match_the_reference(routed, case, dtype):
    import cupy

    import cupyconv
    from cupyconv import reference

    # (method "implicit_gemm": the one-channel problems are depthwise by their groups, which
    # "auto" sends to the depthwise kernels; the route lives in the implicit GEMM's launch)
    for call in range(2):  # the second call replays the first's recording with new arrays
        xh, wh, dyh, opts = _problem(case, dtype, seed=len(routed) + call)
        x, w, dy = (cupy.asarray(a) for a in (xh, wh, dyh))
        ref = reference.conv(xh, wh, layout="NHWC", **opts)
        y = cupy.full(ref.shape, np.nan, dtype=x.dtype)
        cupyconv.conv(x, w, layout="NHWC", out=y, method="implicit_gemm", **opts)
        assert rel_error(y, ref) <= tolerance(dtype, ref), f"forward, call {call}"
        ref = reference.conv_backward_data(dyh, wh, xh.shape, layout="NHWC", **opts)
        dx = cupy.full(xh.shape, np.nan, dtype=x.dtype)
        cupyconv.conv_backward_data(dy, w, xh.shape, layout="NHWC", out=dx,
                                    method="implicit_gemm", **opts)
        assert rel_error(dx, ref) <= tolerance(dtype, ref), f"backward-data, call {call}"
        ref = reference.conv_backward_weight(xh, dyh, wh.shape, layout="NHWC", **opts)
        dw = cupy.full(wh.shape, np.nan, dtype=x.dtype)
        cupyconv.conv_backward_weight(x, dy, wh.shape, layout="NHWC", out=dw,
                                      method="implicit_gemm", **opts)
        assert rel_error(dw, ref) <= tolerance(dtype, ref), f"backward-weight, call {call}"
    # (the second calls replay the first ones' recorded launches, without Python in between)
    assert routed == ["forward", "backward_data", "backward_weight"]


@pytest.mark.parametrize("view", ["reversed_rows", "channel_slice"])
def test_batch_chunks_and_views_of_x(routed, monkeypatch, view):
    """Forward and backward-data in chunks of a few images (CHUNK_BYTES lowered; the last chunk
    shorter), x a view (rows reversed at an offset, or 3 of 4 channels)."""
    import cupy

    import cupyconv
    from cupyconv import reference
    from cupyconv._gemm import tma_columns

    monkeypatch.setattr(tma_columns, "CHUNK_BYTES", 3 * 49 * 51 * 152 * 4)  # 3 images of dcol
    dtype, case = "bfloat16", ((7, 97, 101, 3), 64, (7, 7), dict(stride=2, padding=3))
    xh, wh, dyh, opts = _problem(case, dtype, seed=3)
    rng = np.random.default_rng(4)
    if view == "reversed_rows":
        x = cupy.asarray(random_array(rng, (7, 99, 101, 3), dtype))[:, 98:1:-1]
    else:
        x = cupy.asarray(random_array(rng, (7, 97, 101, 4), dtype))[..., 1:]
    xh = cupy.asnumpy(x)
    w, dy = cupy.asarray(wh), cupy.asarray(dyh)
    ref = reference.conv(xh, wh, layout="NHWC", **opts)
    y = cupyconv.conv(x, w, layout="NHWC", method="implicit_gemm", **opts)
    assert rel_error(y, ref) <= tolerance(dtype, ref)
    ref = reference.conv_backward_data(dyh, wh, xh.shape, layout="NHWC", **opts)
    dx = cupy.full(xh.shape, np.nan, dtype=x.dtype)
    cupyconv.conv_backward_data(dy, w, xh.shape, layout="NHWC", out=dx, **opts)
    assert rel_error(dx, ref) <= tolerance(dtype, ref)
    ref = reference.conv_backward_weight(xh, dyh, wh.shape, layout="NHWC", **opts)
    dw = cupyconv.conv_backward_weight(x, dy, wh.shape, layout="NHWC", **opts)
    assert rel_error(dw, ref) <= tolerance(dtype, ref)
    assert routed == ["forward", "backward_data", "backward_weight"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_nonfinite_values_match_pytorch(routed, dtype):
    """NaN and inf planted in x, w and dy: the non-finite elements of all three passes are
    those of PyTorch's float64 result (padding met by an infinite weight in the forward;
    backward-data reading only real taps at real pixels)."""
    import cupy

    import cupyconv

    torch = pytest.importorskip("torch")
    opts = dict(stride=2, padding=3)
    xh, wh, dyh, _ = _problem(((4, 97, 101, 3), 64, (7, 7), opts), dtype, seed=9)
    x, w, dy = (cupy.asarray(a) for a in (xh, wh, dyh))
    x[0, 40, 50, 1] = np.nan
    x[3, 0, 0, 2] = np.inf
    w[7, 0, 3, 0] = -np.inf   # a tap that meets the padding at the top rows
    dy[1, 10, 20, 5] = np.inf
    dy[2, 48, 50, 63] = np.nan
    # PyTorch's float64 CPU result on the same values (its GPU dgrad may multiply a zero
    # inserted between strided dy pixels by an infinite weight, a NaN no exact sum has)
    tx, tw, tdy = (torch.from_numpy(cupy.asnumpy(a).astype(np.float64)).permute(0, 3, 1, 2)
                   for a in (x, w, dy))
    tx.requires_grad_(True)
    tw.requires_grad_(True)
    ty = torch.nn.functional.conv2d(tx, tw, stride=2, padding=3)
    gx, gw = torch.autograd.grad(ty, (tx, tw), tdy)
    expected = [cupy.asarray(t.detach().permute(0, 2, 3, 1).numpy()) for t in (ty, gx, gw)]
    gemm = dict(method="implicit_gemm", layout="NHWC", **opts)  # (the route's algorithm)
    got = [cupyconv.conv(x, w, **gemm), cupyconv.conv_backward_data(dy, w, x.shape, **gemm),
           cupyconv.conv_backward_weight(x, dy, w.shape, **gemm)]
    for name, a, b in zip(("forward", "backward-data", "backward-weight"), got, expected):
        assert bool((cupy.isnan(a) == cupy.isnan(b)).all()), name
        assert bool((cupy.isposinf(a) == cupy.isposinf(b)).all()), name
        assert bool((cupy.isneginf(a) == cupy.isneginf(b)).all()), name
    assert routed == ["forward", "backward_data", "backward_weight"]


@pytest.mark.parametrize("case", ["whole_chunks", "float32", "channels_first", "bias",
                                  "few_tiles", "switched_off"])
def test_cases_that_keep_the_other_loops(routed, monkeypatch, case):
    import cupy

    import cupyconv
    from cupyconv import reference

    dtype, layout, n, c, k, kw = "bfloat16", "NHWC", 4, 3, 64, dict(stride=2, padding=3)
    if case == "whole_chunks":
        c = 8
    if case == "float32":
        dtype = "float32"
    if case == "few_tiles":
        n = 1
    rng = np.random.default_rng(2)
    xh = random_array(rng, (n, 97, 101, c), dtype)
    wh = random_array(rng, (k, 7, 7, c), dtype)
    x, w = cupy.asarray(xh), cupy.asarray(wh)
    if case == "bias":
        kw["bias"] = cupy.asarray(random_array(rng, (k,), dtype))
    if case == "channels_first":
        layout = "NCHW"
        x = cupy.ascontiguousarray(cupy.moveaxis(x, -1, 1))
        w = cupy.ascontiguousarray(cupy.moveaxis(w, -1, 1))
    if case == "switched_off":
        monkeypatch.setenv("CUPYCONV_TMA", "0")
    y = cupyconv.conv(x, w, layout=layout, **kw)
    ref = reference.conv(x.get(), w.get(), layout=layout,
                         **{a: (v.get() if hasattr(v, "get") else v) for a, v in kw.items()})
    assert rel_error(y, ref) <= tolerance(dtype, ref)
    assert routed == []


@pytest.mark.parametrize("stem,routes", [
    (((32, 224, 224, 3), 64, (7, 7), dict(stride=2, padding=3)), False),   # 254 vs 191 us
    (((32, 224, 224, 3), 32, (3, 3), dict(stride=2, padding=1)), True),    # 87 vs 150 us
    (((32, 224, 224, 3), 96, (4, 4), dict(stride=4)), True),               # 50-66 vs 76 us
])
def test_the_forward_rule_on_the_stems(monkeypatch, stem, routes):
    """cupyconv.conv's own choice (no forcing) on the stems the rule was measured on: the
    column route where it measured faster than the implicit loop (benchmarks/notes/gemm.md,
    session 32); a correct result either way."""
    import cupy

    import cupyconv
    from cupyconv._core.caches import clear_caches
    from cupyconv._gemm import tma_columns

    clear_caches()
    ran, real = [], tma_columns.forward
    monkeypatch.setattr(tma_columns, "forward", lambda *a: ran.append(1) or real(*a))
    x_shape, k, kernel, opts = stem
    rng = np.random.default_rng(1)
    x = cupy.asarray(random_array(rng, x_shape, "bfloat16"))
    w = cupy.asarray(random_array(rng, (k, *kernel, 3), "bfloat16"))
    y = cupyconv.conv(x, w, layout="NHWC", **opts)
    ref = cupyconv.conv(x.astype(cupy.float32), w.astype(cupy.float32), layout="NHWC", **opts)
    assert rel_error(y, ref) <= 2e-2
    assert bool(ran) == routes
    clear_caches()
