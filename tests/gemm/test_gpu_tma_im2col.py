"""The TMA kernel's im2col mode (``_gemm/tma_conv.py``, ``prepare_im2col``) on an sm_90
GPU: channels-last forward convolutions and stride-1 backward-data (a forward over dy with the
filter turned half a turn) against the float64 reference into poisoned outputs,
over strides, paddings, dilations, channel counts that leave a partial 64-channel block, outputs
whose pixels cross images within a tile, a relaunch with new data in the same arrays, and
NaN/inf planted in x and w reaching exactly the outputs the reference gives them (an infinite
weight of a tap's channel past a partial block must not meet the zeros TMA fills there)."""

import numpy as np
import pytest

from cupyconv._core.verify import random_array, rel_error, tolerance

pytestmark = pytest.mark.gpu

DTYPES = ("float16", "bfloat16")
# (N, H, W, C, K, R, S, stride, padding, dilation)
CASES = [
    (2, 13, 11, 64, 64, 3, 3, 1, 1, 1),      # tiles cross images; M = 286
    (3, 14, 14, 128, 96, 3, 3, 2, 1, 1),     # stride 2
    (2, 9, 10, 72, 40, 3, 3, 1, 1, 1),       # a partial channel block; K not a multiple of 8
    (4, 15, 15, 256, 136, 1, 1, 2, 0, 1),    # 1x1 stride 2 (ResNet-50's downsampling)
    (1, 20, 17, 24, 48, 5, 5, 1, 4, 2),      # dilation 2
    (2, 31, 29, 8, 64, 7, 7, 2, 3, 1),       # a stem-like 7x7 on 8 channels
    (1, 6, 6, 192, 256, 3, 3, 1, 0, 1),      # no padding
]


@pytest.fixture(autouse=True)
def _hopper():
    import cupy

    if cupy.cuda.runtime.is_hip or cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the TMA kernel needs an NVIDIA GPU of compute capability 9.0")
    pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings (the cuda13/cuda12 extra)")


def _run(x, w, stride, padding, dilation, out):
    from cupyconv._gemm.tma_conv import prepare_im2col

    launch, y = prepare_im2col(x, w, out, stride=(stride,) * 2, padding=(padding,) * 2,
                                       dilation=(dilation,) * 2)
    launch()
    return launch, y


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_im2col_forward_matches_reference(case, dtype):
    import cupy

    from cupyconv import reference

    n, h, wd, c, k, r, s, stride, padding, dilation = case
    rng = np.random.default_rng(sum(case))
    xh = random_array(rng, (n, h, wd, c), dtype)
    wh = random_array(rng, (k, r, s, c), dtype)
    x, w = cupy.asarray(xh), cupy.asarray(wh)
    ref = reference.conv(xh, wh, stride=stride, padding=padding, dilation=dilation, layout="NHWC")
    out = cupy.full(ref.shape, np.nan, dtype=x.dtype)
    launch, y = _run(x, w, stride, padding, dilation, out)
    assert y is out
    assert rel_error(y, ref) <= tolerance(dtype, ref)
    # the same launch on new data in the same arrays (the maps hold the addresses)
    xh2 = random_array(rng, xh.shape, dtype)
    x[...] = cupy.asarray(xh2)
    out.fill(np.nan)
    launch()
    ref2 = reference.conv(xh2, wh, stride=stride, padding=padding, dilation=dilation,
                          layout="NHWC")
    assert rel_error(out, ref2) <= tolerance(dtype, ref2)


# (N, H, W, C, K, R, S, stride, padding, dilation): float32 with TF32 products; C a multiple of
# 4 (16-byte channel rows), not always of the 32 channels a k slice takes
TF32_CASES = [
    (4, 17, 19, 64, 136, 3, 3, 1, 1, 1),
    (3, 20, 21, 36, 72, 3, 3, 2, 1, 1),     # a partial channel block per tap
    (2, 16, 16, 32, 40, 5, 5, 1, 4, 2),     # dilated
    (5, 14, 13, 96, 264, 1, 1, 2, 0, 1),    # 1x1 stride 2, two column tiles and a part
]


@pytest.mark.parametrize("case", TF32_CASES, ids=lambda c: "x".join(map(str, c)))
def test_im2col_forward_in_tf32_is_within_tf32_rounding_of_float64(case):
    """float32 x and w on the im2col mode with TF32 products (the TF32 tile): within 2x the
    error of the float64 convolution of TF32-rounded operands (verify.tf32_tolerance), out
    poisoned.  (TMA's TFLOAT32 copies round the operands to nearest,
    as this bound needs: experiments/exp_tma_tf32.py.)"""
    import cupy

    from cupyconv import reference
    from cupyconv._core.verify import round_tf32, tf32_tolerance

    n, h, wd, c, k, r, s, stride, padding, dilation = case
    rng = np.random.default_rng(sum(case))
    xh = random_array(rng, (n, h, wd, c), "float32")
    wh = random_array(rng, (k, r, s, c), "float32")
    opts = dict(stride=stride, padding=padding, dilation=dilation, layout="NHWC")
    ref = reference.conv(xh.astype(np.float64), wh.astype(np.float64), **opts)
    rounded = reference.conv(round_tf32(xh).astype(np.float64),
                             round_tf32(wh).astype(np.float64), **opts)
    out = cupy.full(ref.shape, np.nan, dtype=cupy.float32)
    _, y = _run(cupy.asarray(xh), cupy.asarray(wh), stride, padding, dilation, out)
    assert y is out
    assert rel_error(y, ref) <= tf32_tolerance(ref, rounded)


@pytest.mark.parametrize("dtype", DTYPES)
def test_im2col_nonfinite_values_reach_the_reference_outputs(dtype):
    import cupy

    from cupyconv import reference

    n, h, wd, c, k = 2, 9, 10, 72, 16  # channel blocks 64 + 8: the second one mostly zero-filled
    rng = np.random.default_rng(7)
    xh = random_array(rng, (n, h, wd, c), dtype)
    wh = random_array(rng, (k, 3, 3, c), dtype)
    xh[0, 4, 5, 3] = np.inf
    xh[1, 0, 9, 70] = np.nan
    wh[5, 1, 2, 71] = -np.inf   # the last real channel of a partial block
    ref = reference.conv(xh, wh, padding=1, layout="NHWC")
    out = cupy.full(ref.shape, 0.5, dtype=xh.dtype)
    _run(cupy.asarray(xh), cupy.asarray(wh), 1, 1, 1, out)
    got = cupy.asnumpy(out).astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(ref))
    fin = np.isfinite(ref)
    assert rel_error(got[fin], ref[fin]) <= tolerance(dtype, ref[fin])


def _spy(monkeypatch):
    """The problems ((N, H, W, C), (K, R, S, C)) that cupyconv's calls run on the im2col mode."""
    import importlib

    module = importlib.import_module("cupyconv._gemm.tma_conv")
    calls, real = [], module.prepare_im2col

    def spy(x, w, *args, **kwargs):
        prepared = real(x, w, *args, **kwargs)  # (a refusal raises: the call falls back)
        calls.append((tuple(x.shape), tuple(w.shape), kwargs.get("data", False)))
        return prepared

    monkeypatch.setattr(module, "prepare_im2col", spy)
    return calls


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel,opts", [
    (3, dict(padding=1)),
    (3, dict(stride=2, padding=1)),
    (1, dict(stride=2)),
    (2, dict(padding="same")),               # asymmetric: (0, 1) on each axis
    (3, dict(padding=((2, 0), (0, 1)), dilation=2)),
])
def test_conv_routes_to_the_im2col_mode(monkeypatch, dtype, kernel, opts):
    import cupy

    import cupyconv
    from cupyconv import reference
    from cupyconv._core.caches import clear_caches

    clear_caches()
    calls = _spy(monkeypatch)
    rng = np.random.default_rng(kernel + len(opts))
    for call in range(2):  # the second call replays the first's recording with new arrays
        xh = random_array(rng, (32, 19, 21, 64), dtype)  # (enough output tiles to route)
        wh = random_array(rng, (264, kernel, kernel, 64), dtype)
        ref = reference.conv(xh, wh, layout="NHWC", **opts)
        y = cupyconv.conv(cupy.asarray(xh), cupy.asarray(wh), layout="NHWC", **opts)
        assert rel_error(y, ref) <= tolerance(dtype, ref), f"call {call}"
    assert calls == [((32, 19, 21, 64), (264, kernel, kernel, 64), False)]
    clear_caches()


@pytest.mark.parametrize("case", ["bias", "channels_first", "float32", "view", "few_tiles",
                                  "switched_off", "odd_channels"])
def test_conv_cases_that_keep_the_implicit_kernel(monkeypatch, case):
    import cupy

    import cupyconv
    from cupyconv import reference
    from cupyconv._core.caches import clear_caches

    clear_caches()
    calls = _spy(monkeypatch)
    dtype, layout, kw = "bfloat16", "NHWC", dict(padding=1)
    n, c, h, wd = 8, 64, 33, 35
    if case == "float32":
        dtype = "float32"
    if case == "few_tiles":  # 2 output tiles: under 1 / SPLIT_MIN_TILE_SHARE of a wave
        n, h, wd = 1, 9, 11
    if case == "odd_channels":
        c = 60
    rng = np.random.default_rng(11)
    xh = random_array(rng, (n, h, wd, c), dtype)
    wh = random_array(rng, (136, 3, 3, c), dtype)
    x, w = cupy.asarray(xh), cupy.asarray(wh)
    if case == "bias":
        kw["bias"] = cupy.asarray(random_array(rng, (136,), dtype))
    if case == "channels_first":
        layout = "NCHW"
        x = cupy.ascontiguousarray(cupy.moveaxis(x, -1, 1))
        w = cupy.ascontiguousarray(cupy.moveaxis(w, -1, 1))
    if case == "view":  # a C-contiguous x at an 8-byte offset
        x = cupy.concatenate([cupy.zeros(4, x.dtype), x.ravel()])[4:].reshape(x.shape)
    if case == "switched_off":
        monkeypatch.setenv("CUPYCONV_TMA", "0")
    y = cupyconv.conv(x, w, layout=layout, **kw)
    ref = reference.conv(x.get(), w.get(), layout=layout,
                         **{k: (v.get() if hasattr(v, "get") else v) for k, v in kw.items()})
    assert rel_error(y, ref) <= tolerance(dtype, ref)
    assert calls == []
    clear_caches()


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_nonfinite_inputs_match_pytorch(monkeypatch, dtype):
    """NaN and inf planted in x and w (an infinite weight on a partial channel block's last
    channel): the non-finite outputs of the routed call are PyTorch's."""
    import cupy

    import cupyconv
    from cupyconv._core.caches import clear_caches

    torch = pytest.importorskip("torch")
    clear_caches()
    calls = _spy(monkeypatch)
    rng = np.random.default_rng(5)
    x = cupy.asarray(random_array(rng, (32, 33, 35, 72), dtype))
    w = cupy.asarray(random_array(rng, (136, 3, 3, 72), dtype))
    x[0, 3, 5, 7] = np.nan
    x[5, 32, 0, 70] = np.inf
    w[9, 2, 1, 71] = -np.inf
    y = cupyconv.conv(x, w, layout="NHWC", stride=2, padding=1)
    tx, tw = (torch.from_dlpack(a).permute(0, 3, 1, 2) for a in (x, w))
    ty = torch.nn.functional.conv2d(tx, tw, stride=2, padding=1).permute(0, 2, 3, 1)
    ty = cupy.from_dlpack(ty.contiguous())
    assert bool((cupy.isnan(y) == cupy.isnan(ty)).all())
    assert bool((cupy.isinf(y) == cupy.isinf(ty)).all())
    assert bool((cupy.sign(y[cupy.isinf(y)]) == cupy.sign(ty[cupy.isinf(ty)])).all())
    assert len(calls) == 1
    clear_caches()


# (N, H, W, C, K, R, S, padding, dilation): stride-1 problems for backward-data
DATA_CASES = [
    (2, 13, 11, 64, 64, 3, 3, 1, 1),
    (2, 9, 10, 72, 40, 3, 3, 1, 1),      # partial channel blocks on both sides
    (1, 20, 17, 24, 48, 5, 5, 4, 2),     # dilation 2
    (3, 7, 7, 128, 256, 3, 3, 0, 1),     # no padding: dy smaller than dx
    (2, 12, 12, 64, 32, 1, 1, 1, 1),     # padding beyond the filter's reach
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", DATA_CASES, ids=lambda c: "x".join(map(str, c)))
def test_im2col_backward_data_matches_reference(case, dtype):
    import cupy

    from cupyconv import reference
    from cupyconv._gemm.tma_conv import prepare_im2col

    n, h, wd, c, k, r, s, padding, dilation = case
    rng = np.random.default_rng(sum(case) + 1)
    x_shape = (n, h, wd, c)
    wh = random_array(rng, (k, r, s, c), dtype)
    oh = h + 2 * padding - dilation * (r - 1)
    ow = wd + 2 * padding - dilation * (s - 1)
    dyh = random_array(rng, (n, oh, ow, k), dtype)
    ref = reference.conv_backward_data(dyh, wh, x_shape, padding=padding, dilation=dilation,
                                       layout="NHWC")
    out = cupy.full(x_shape, np.nan, dtype=dyh.dtype)
    reach = (dilation * (r - 1), dilation * (s - 1))
    launch, dx = prepare_im2col(cupy.asarray(dyh), cupy.asarray(wh), out,
                                padding=(reach[0] - padding, reach[1] - padding),
                                dilation=(dilation,) * 2, out_hw=(h, wd), data=True)
    launch()
    assert dx is out
    assert rel_error(dx, ref) <= tolerance(dtype, ref)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kernel,opts", [(3, dict(padding=1)), (3, dict(padding=2, dilation=2)),
                                         (2, dict(padding="same"))])
def test_conv_backward_data_routes_to_the_im2col_mode(monkeypatch, dtype, kernel, opts):
    import cupy

    import cupyconv
    from cupyconv import reference
    from cupyconv._core.caches import clear_caches

    clear_caches()
    calls = _spy(monkeypatch)
    rng = np.random.default_rng(kernel + 3)
    x_shape = (32, 19, 21, 64)
    y_shape = cupyconv.conv(cupy.zeros(x_shape, dtype),
                            cupy.zeros((264, kernel, kernel, 64), dtype), layout="NHWC",
                            **opts).shape
    clear_caches()
    calls.clear()
    for call in range(2):
        wh = random_array(rng, (264, kernel, kernel, 64), dtype)
        dyh = random_array(rng, y_shape, dtype)
        ref = reference.conv_backward_data(dyh, wh, x_shape, layout="NHWC", **opts)
        dx = cupyconv.conv_backward_data(cupy.asarray(dyh), cupy.asarray(wh), x_shape,
                                         layout="NHWC", **opts)
        assert rel_error(dx, ref) <= tolerance(dtype, ref), f"call {call}"
    assert calls == [(y_shape, (264, kernel, kernel, 64), True)]
    clear_caches()


# (x shape, dy shape, stride, the im2col launches and whether they run in backward-data mode):
# stride 1 is one launch over dy with the filter turned; stride 2 four stride phases, each a
# forward over dy with its taps
NONFINITE_DATA_CASES = [((32, 17, 19, 72), (32, 17, 19, 136), 1, 1, True),
                        ((32, 28, 27, 64), (32, 14, 14, 136), 2, 4, False)]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", NONFINITE_DATA_CASES, ids=lambda c: f"stride{c[2]}")
def test_backward_data_nonfinite_inputs_match_pytorch(monkeypatch, dtype, case):
    """NaN and inf planted in dy and w (the last channel of a tap's block among them) reach
    exactly the dx elements PyTorch's gradient has non-finite, in one launch and through the
    stride phases (each reads only its taps of w)."""
    import cupy

    import cupyconv
    from cupyconv._core.caches import clear_caches

    torch = pytest.importorskip("torch")
    x_shape, dy_shape, stride, launches, data_mode = case
    clear_caches()
    calls = _spy(monkeypatch)
    rng = np.random.default_rng(9 + 10 * (stride - 1))
    c = x_shape[3]
    dy = cupy.asarray(random_array(rng, dy_shape, dtype))
    w = cupy.asarray(random_array(rng, (136, 3, 3, c), dtype))
    dy[0, 3, 5, 7] = np.nan
    dy[5, dy_shape[1] - 1, 0, 130] = np.inf
    w[9, 2, 1, c - 1] = -np.inf
    dx = cupyconv.conv_backward_data(dy, w, x_shape, layout="NHWC", stride=stride, padding=1)
    tdy, tw = (torch.from_dlpack(a).permute(0, 3, 1, 2) for a in (dy, w))
    tdx = torch.nn.grad.conv2d_input((x_shape[0], c) + x_shape[1:3], tw, tdy, stride=stride,
                                     padding=1)
    tdx = cupy.from_dlpack(tdx.permute(0, 2, 3, 1).contiguous())
    assert bool((cupy.isnan(dx) == cupy.isnan(tdx)).all())
    assert bool((cupy.isinf(dx) == cupy.isinf(tdx)).all())
    assert len(calls) == launches and all(data == data_mode for _, _, data in calls)
    clear_caches()


# Strided backward-data, each stride phase on the im2col mode: (x shape NHWC, K, kernel, options,
# phases); every phase has enough output tiles to route (1/8 of an H200's multiprocessors).
STRIDED_DATA_CASES = [
    ((32, 28, 28, 64), 136, 3, dict(stride=2, padding=1), 4),           # ResNet-50's downsampling
    ((32, 27, 29, 64), 72, 3, dict(stride=2, padding=1), 4),            # odd planes: phases differ
    ((32, 28, 28, 64), 136, 2, dict(stride=2), 4),                      # ConvNeXt-T: one tap each
    ((32, 28, 28, 64), 136, 1, dict(stride=2), 1),                      # 1x1: rows no tap reaches
    ((32, 30, 30, 64), 72, 3, dict(stride=3, padding=1), 9),            # stride 3: one tap each
    ((32, 29, 29, 72), 64, 3, dict(stride=2, padding=3, dilation=3), 4),  # dilated phases
    ((32, 29, 29, 72), 64, 5, dict(stride=2, padding=4, dilation=2), 1),  # dilation = stride:
    # every tap in one phase, the odd rows zero
    ((32, 28, 30, 64), 72, 3, dict(stride=(2, 1), padding=(1, 0)), 2),  # stride on one axis
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", STRIDED_DATA_CASES, ids=lambda c: f"{c[2]}x{c[2]}-{c[3]}")
def test_strided_backward_data_runs_each_phase_on_the_im2col_mode(monkeypatch, dtype, case):
    """Each stride phase is a forward over dy on the im2col mode (one prepared launch per phase,
    replayed on a second call), its rows copied into dx, rows no tap reaches zero: within
    tolerance of the float64 reference, dx poisoned first."""
    import cupy

    import cupyconv
    from cupyconv import reference
    from cupyconv._core.caches import clear_caches

    x_shape, k, kernel, opts, phases = case
    clear_caches()
    calls = _spy(monkeypatch)
    rng = np.random.default_rng(kernel + k)
    w_shape = (k, kernel, kernel, x_shape[3])
    y_shape = cupyconv.conv(cupy.zeros(x_shape, dtype), cupy.zeros(w_shape, dtype),
                            layout="NHWC", **opts).shape
    clear_caches()
    calls.clear()
    for call in range(2):
        wh = random_array(rng, w_shape, dtype)
        dyh = random_array(rng, y_shape, dtype)
        ref = reference.conv_backward_data(dyh, wh, x_shape, layout="NHWC", **opts)
        dx = cupy.full(x_shape, np.nan, dtype)
        got = cupyconv.conv_backward_data(cupy.asarray(dyh), cupy.asarray(wh), x_shape,
                                          layout="NHWC", out=dx, **opts)
        assert got is dx
        assert rel_error(dx, ref) <= tolerance(dtype, ref), f"call {call}"
    assert len(calls) == phases and all(shape == y_shape and not data
                                        for shape, _, data in calls)
    clear_caches()


# (N, H, W, C, K, R, S, stride, padding, dilation): backward-weight problems with enough pixels
# for split-K to fill half the multiprocessors of an H200
WEIGHT_CASES = [
    (4, 32, 32, 64, 64, 3, 3, 1, 1, 1),     # 5 column tiles of one row tile
    (8, 33, 35, 128, 96, 3, 3, 2, 1, 1),    # stride 2; K not a multiple of 64
    (2, 40, 37, 64, 48, 5, 5, 1, 4, 2),     # dilation 2
    (5, 30, 30, 64, 40, 3, 3, 1, 0, 1),     # no padding; the last slice partly past P
    (2, 28, 28, 256, 256, 3, 3, 1, 1, 1),   # two row tiles
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", WEIGHT_CASES, ids=lambda c: "x".join(map(str, c)))
def test_im2col_backward_weight_matches_reference(case, dtype):
    import cupy

    from cupyconv import reference
    from cupyconv._gemm.tma_conv import prepare_im2col_weight

    n, h, wd, c, k, r, s, stride, padding, dilation = case
    rng = np.random.default_rng(sum(case) + 2)
    xh = random_array(rng, (n, h, wd, c), dtype)
    oh = (h + 2 * padding - dilation * (r - 1) - 1) // stride + 1
    ow = (wd + 2 * padding - dilation * (s - 1) - 1) // stride + 1
    dyh = random_array(rng, (n, oh, ow, k), dtype)
    ref = reference.conv_backward_weight(xh, dyh, (k, r, s, c), stride=stride, padding=padding,
                                         dilation=dilation, layout="NHWC")
    dw = cupy.full((k, r, s, c), np.nan, dtype=xh.dtype)
    launch, out = prepare_im2col_weight(cupy.asarray(xh), cupy.asarray(dyh), dw,
                                        stride=(stride,) * 2, padding=(padding,) * 2,
                                        dilation=(dilation,) * 2)
    launch()
    assert out is dw
    assert rel_error(dw, ref) <= tolerance(dtype, ref)
    first = dw.copy()
    launch()  # split-K parts summed in order: bitwise the same again
    assert bool((dw == first).all())


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_backward_weight_routes_to_the_im2col_mode(monkeypatch, dtype):
    """cupyconv.conv_backward_weight takes the mode (a spy on prepare_im2col_weight), its
    result within tolerance on a replayed second call too, with NaN/inf planted in x and dy
    reaching exactly the reference's non-finite elements."""
    import importlib

    import cupy

    import cupyconv
    from cupyconv import reference
    from cupyconv._core.caches import clear_caches

    module = importlib.import_module("cupyconv._gemm.tma_conv")
    calls, real = [], module.prepare_im2col_weight

    def spy(*args, **kwargs):
        prepared = real(*args, **kwargs)
        calls.append(1)
        return prepared

    monkeypatch.setattr(module, "prepare_im2col_weight", spy)
    clear_caches()
    rng = np.random.default_rng(3)
    for call in range(2):
        xh = random_array(rng, (16, 28, 28, 128), dtype)  # (enough pixels for split-K)
        dyh = random_array(rng, (16, 14, 14, 128), dtype)
        if call:
            xh[1, 5, 6, 70] = np.inf
            dyh[2, 13, 13, 9] = np.nan
            dyh[0, 0, 0, 3] = -np.inf   # meets the padding: zeros times inf
        ref = reference.conv_backward_weight(xh, dyh, (128, 3, 3, 128), stride=2, padding=1,
                                             layout="NHWC")
        dw = cupyconv.conv_backward_weight(cupy.asarray(xh), cupy.asarray(dyh), (128, 3, 3, 128),
                                           stride=2, padding=1, layout="NHWC")
        got = cupy.asnumpy(dw).astype(np.float64)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
        np.testing.assert_array_equal(np.isposinf(got), np.isposinf(ref))
        np.testing.assert_array_equal(np.isneginf(got), np.isneginf(ref))
        fin = np.isfinite(ref)
        assert rel_error(got[fin], ref[fin]) <= tolerance(dtype, ref[fin]), f"call {call}"
    assert calls == [1]  # (the second call replays the first's launches)
    clear_caches()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("data", [False, True])
@pytest.mark.parametrize("splits", [2, 5, 1000])  # (1000: as many parts as k slices)
def test_im2col_split_k_matches_reference_and_repeats_bitwise(dtype, data, splits):
    import cupy

    from cupyconv import reference
    from cupyconv._gemm.tma_conv import prepare_im2col

    rng = np.random.default_rng(splits + data)
    n, h, wd, c, k = 3, 9, 10, 136, 72  # 3 channel blocks per tap, the last one partial
    wh = random_array(rng, (k, 3, 3, c), dtype)
    if data:
        dyh = random_array(rng, (n, h, wd, k), dtype)
        ref = reference.conv_backward_data(dyh, wh, (n, h, wd, c), padding=1, layout="NHWC")
        # (backward-data's channels: dy's k = 72 reduced, dx's c = 136 produced)
        out = cupy.full(ref.shape, np.nan, dtype=dyh.dtype)
        launch, got = prepare_im2col(cupy.asarray(dyh), cupy.asarray(wh), out, padding=(1, 1),
                                     out_hw=(h, wd), data=True, splits=splits)
    else:
        xh = random_array(rng, (n, h, wd, c), dtype)
        ref = reference.conv(xh, wh, padding=1, layout="NHWC")
        out = cupy.full(ref.shape, np.nan, dtype=xh.dtype)
        launch, got = prepare_im2col(cupy.asarray(xh), cupy.asarray(wh), out, padding=(1, 1),
                                     splits=splits)
    launch()
    assert got is out
    assert rel_error(out, ref) <= tolerance(dtype, ref)
    first = out.copy()
    launch()
    assert bool((out == first).all())


@pytest.mark.parametrize("dtype", DTYPES)
def test_conv_splits_k_on_the_im2col_mode_for_few_tiles(monkeypatch, dtype):
    """A layer of 20 output tiles (under half of an H200's 132 multiprocessors, over an eighth)
    runs on the im2col mode with split-K, its forward and backward-data within tolerance."""
    import cupy

    import cupyconv
    from cupyconv import reference
    from cupyconv._core.caches import clear_caches

    clear_caches()
    calls = _spy(monkeypatch)
    rng = np.random.default_rng(8)
    xh = random_array(rng, (24, 7, 7, 256), dtype)
    wh = random_array(rng, (256, 3, 3, 256), dtype)
    dyh = random_array(rng, (24, 7, 7, 256), dtype)
    ref = reference.conv(xh, wh, padding=1, layout="NHWC")
    y = cupyconv.conv(cupy.asarray(xh), cupy.asarray(wh), padding=1, layout="NHWC")
    assert rel_error(y, ref) <= tolerance(dtype, ref)
    ref = reference.conv_backward_data(dyh, wh, xh.shape, padding=1, layout="NHWC")
    dx = cupyconv.conv_backward_data(cupy.asarray(dyh), cupy.asarray(wh), xh.shape, padding=1,
                                     layout="NHWC")
    assert rel_error(dx, ref) <= tolerance(dtype, ref)
    assert [data for *_, data in calls] == [False, True]
    clear_caches()


@pytest.mark.parametrize("dtype", DTYPES + ("float32",))  # (float32: TF32 products)
@pytest.mark.parametrize("splits", [1, 3])
def test_im2col_writes_a_strided_view_of_rows_unsplit_and_split(dtype, splits):
    """The epilogue (unsplit: staged 16-bit rows, or TF32's float32 pairs from the fragments)
    and the split-K reduction (split) place the output rows through a strided view's pitches
    (a stride phase's rows of dx): the view within tolerance of the float64 reference (TF32:
    verify.tf32_tolerance), every element of the array outside it left as it was (NaN)."""
    import cupy

    from cupyconv import reference
    from cupyconv._core.verify import round_tf32, tf32_tolerance
    from cupyconv._gemm.tma_conv import prepare_im2col

    rng = np.random.default_rng(splits)
    n, h, wd, c, k = 3, 9, 10, 136, 72
    xh = random_array(rng, (n, h, wd, c), dtype)
    wh = random_array(rng, (k, 3, 3, c), dtype)
    ref = reference.conv(xh.astype(np.float64), wh.astype(np.float64), padding=1, layout="NHWC")
    if dtype == "float32":
        bound = tf32_tolerance(ref, reference.conv(round_tf32(xh).astype(np.float64),
                                                   round_tf32(wh).astype(np.float64),
                                                   padding=1, layout="NHWC"))
    else:
        bound = tolerance(dtype, ref)
    whole = cupy.full((n, 2 * h + 1, 2 * wd, k + 8), np.nan, dtype=xh.dtype)
    view = whole[:, 1::2, ::2, 8:]
    launch, got = prepare_im2col(cupy.asarray(xh), cupy.asarray(wh), view, padding=(1, 1),
                                 splits=splits)
    launch()
    assert got is view
    assert rel_error(view, ref) <= bound
    outside = cupy.ones(whole.shape, dtype=bool)
    outside[:, 1::2, ::2, 8:] = False
    assert bool(cupy.isnan(whole[outside]).all())


@pytest.mark.parametrize("kernel,opts", [(3, dict(padding=1)), (3, dict(stride=2, padding=1)),
                                         (1, dict())])
def test_channels_last_float32_at_tf32_runs_on_the_tma_kernel(monkeypatch, kernel, opts):
    """conv(precision="tf32") of channels-last float32 arrays: the forward on the TMA kernel
    (3x3 through the im2col mode, 1x1 as one product), and the 1x1 backward-data too (the
    weight copied K-major); within TF32 rounding of float64, outputs poisoned.  The same call
    at precision "exact" stays off the TMA kernel."""
    import importlib

    import cupy

    import cupyconv
    from cupyconv import reference
    from cupyconv._core.caches import clear_caches
    from cupyconv._core.verify import round_tf32, tf32_tolerance

    clear_caches()
    im2col_calls = _spy(monkeypatch)
    module = importlib.import_module("cupyconv._gemm.tma_conv")
    gemm_calls, real = [], module.prepare_gemm_tma

    def spy(a, b, c, **kwargs):
        gemm_calls.append(str(a.dtype))
        return real(a, b, c, **kwargs)

    monkeypatch.setattr(module, "prepare_gemm_tma", spy)
    rng = np.random.default_rng(kernel)
    x_shape, w_shape = (32, 28, 28, 64), (136, kernel, kernel, 64)
    xh = random_array(rng, x_shape, "float32")
    wh = random_array(rng, w_shape, "float32")
    full = dict(layout="NHWC", **opts)
    ref = reference.conv(xh.astype(np.float64), wh.astype(np.float64), **full)
    rounded = reference.conv(round_tf32(xh).astype(np.float64),
                             round_tf32(wh).astype(np.float64), **full)
    y = cupy.full(ref.shape, np.nan, dtype=cupy.float32)
    cupyconv.conv(cupy.asarray(xh), cupy.asarray(wh), out=y, precision="tf32", **full)
    assert rel_error(y, ref) <= tf32_tolerance(ref, rounded)
    if kernel == 1:
        assert gemm_calls == ["float32"] and im2col_calls == []
        dyh = random_array(rng, ref.shape, "float32")
        ref_dx = reference.conv_backward_data(dyh.astype(np.float64), wh.astype(np.float64),
                                              x_shape, **full)
        rounded_dx = reference.conv_backward_data(round_tf32(dyh).astype(np.float64),
                                                  round_tf32(wh).astype(np.float64), x_shape,
                                                  **full)
        dx = cupy.full(x_shape, np.nan, dtype=cupy.float32)
        cupyconv.conv_backward_data(cupy.asarray(dyh), cupy.asarray(wh), x_shape, out=dx,
                                    precision="tf32", **full)
        assert rel_error(dx, ref_dx) <= tf32_tolerance(ref_dx, rounded_dx)
        assert gemm_calls == ["float32"] * 2
    else:
        assert len(im2col_calls) == 1 and gemm_calls == []
    gemm_calls.clear()
    im2col_calls.clear()
    cupyconv.conv(cupy.asarray(xh), cupy.asarray(wh), precision="exact", **full)
    assert gemm_calls == [] and im2col_calls == []
    clear_caches()
