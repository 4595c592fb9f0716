"""Channels-last 1x1 convolutions on the TMA GEMM (``_gemm/tma_conv.py``) on an sm_90 GPU: which
calls take it (forward and backward-data always, backward-weight where its split-K parts fill the
GPU; nothing with epilogue options, groups, strides, padding, channels that break 16-byte rows,
or CUPYCONV_TMA=0: strided and padded forwards take the im2col mode, test_gpu_tma_im2col.py), results against the
float64 reference into poisoned outputs, a warm call with new arrays (the replay re-encodes the
tensor maps), and NaN/inf planted in the inputs reaching exactly the outputs PyTorch's dense
product gives them (a row of x, a column of w)."""

import importlib

import numpy as np
import pytest

from cupyconv._core.verify import random_array, rel_error, tolerance

pytestmark = pytest.mark.gpu

DTYPES = ("float16", "bfloat16")


@pytest.fixture(autouse=True)
def _hopper():
    import cupy

    if cupy.cuda.runtime.is_hip or cupy.cuda.Device().compute_capability != "90":
        pytest.skip("the TMA GEMM needs an NVIDIA GPU of compute capability 9.0")
    pytest.importorskip("cuda.bindings.driver", reason="cuda-bindings (the cuda13/cuda12 extra)")
    from cupyconv._core.caches import clear_caches

    clear_caches()  # (routing is decided when a call is prepared: no prepared call of another test)
    yield
    clear_caches()


def _spy(monkeypatch):
    """The problems (m, n, k) that run on the TMA kernel through tma_conv."""
    module = importlib.import_module("cupyconv._gemm.tma_conv")
    calls, real = [], module.prepare_gemm_tma

    def spy(a, b, c, **kwargs):
        calls.append((a.shape[0], b.shape[1], a.shape[1]))
        return real(a, b, c, **kwargs)

    monkeypatch.setattr(module, "prepare_gemm_tma", spy)
    return calls


def _arrays(batch, size, cin, cout, dtype, seed):
    import cupy

    rng = np.random.default_rng(seed)
    x = cupy.asarray(random_array(rng, (batch, size, size, cin), dtype))
    w = cupy.asarray(random_array(rng, (cout, 1, 1, cin), dtype))
    dy = cupy.asarray(random_array(rng, (batch, size, size, cout), dtype))
    return x, w, dy


def _offset(a):
    """A copy of ``a`` that starts 8 bytes into its buffer (TMA needs 16-byte aligned rows)."""
    import cupy

    return cupy.concatenate([cupy.zeros(4, a.dtype), a.ravel()])[4:].reshape(a.shape)


def _check(got, want, dtype):
    assert rel_error(got, want) <= tolerance(dtype, want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cin,cout", [(256, 64), (64, 32), (64, 256), (264, 520)])
def test_pointwise_forward_and_data_on_tma(monkeypatch, dtype, cin, cout):
    import cupy

    import cupyconv
    from cupyconv import reference
    from cupyconv._core.launch import sm_count
    from cupyconv._gemm.tma_splits import weight_splits

    calls = _spy(monkeypatch)
    batch, size = 8, 33  # 8712 pixels: 69 row tiles, more than half of 132 multiprocessors
    for seed in (0, 1):  # the second call replays the first's recording with new arrays
        x, w, dy = _arrays(batch, size, cin, cout, dtype, seed)
        y = cupy.full((batch, size, size, cout), np.nan, dtype=x.dtype)
        dx = cupy.full(x.shape, np.nan, dtype=x.dtype)
        dw = cupy.full(w.shape, np.nan, dtype=x.dtype)
        assert cupyconv.conv(x, w, layout="NHWC", out=y) is y
        assert cupyconv.conv_backward_data(dy, w, x.shape, layout="NHWC", out=dx) is dx
        assert cupyconv.conv_backward_weight(x, dy, w.shape, layout="NHWC", out=dw) is dw
        _check(y, reference.conv(x.get(), w.get(), layout="NHWC"), dtype)
        _check(dx, reference.conv_backward_data(dy.get(), w.get(), x.shape, layout="NHWC"), dtype)
        _check(dw, reference.conv_backward_weight(x.get(), dy.get(), w.shape, layout="NHWC"),
               dtype)
        if seed == 0:  # backward-weight is bitwise repeatable (split-K parts added in order)
            again = cupyconv.conv_backward_weight(x, dy, w.shape, layout="NHWC",
                                                  out=cupy.empty_like(dw))  # (a replay)
            assert bool((again == dw).all())
    m = batch * size * size
    weight_on_tma = weight_splits(cout, cin, m, sm_count(0)) is not None
    want = [(m, cout, cin), (m, cin, cout)] + ([(cout, cin, m)] if weight_on_tma else [])
    assert calls == want  # (prepared once per pass: later calls replayed)
    assert weight_on_tma or (cin, cout) == (64, 32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cin,cout,splits", [(2048, 512, None), (512, 2048, None),
                                             (1152, 192, None), (2048, 512, 3), (192, 1152, 2)])
def test_pointwise_with_few_output_tiles_on_tma(monkeypatch, dtype, cin, cout, splits):
    """ResNet-50's and EfficientNet-B0's 1x1 layers at 7^2 (batch 32: 1568 pixels, 13 row
    tiles): forward and backward-data outputs of 26-52 tiles, under half of an H200's
    multiprocessors, run on the TMA kernel (unsplit by the estimate, or with ``splits`` forced),
    within tolerance of float64 and bitwise repeatable (split parts are added in order)."""
    import cupy

    import cupyconv
    from cupyconv import reference
    from cupyconv._core.caches import clear_caches
    from cupyconv._gemm import tma_conv

    clear_caches()  # (routing is decided when a call is prepared)
    if splits is not None:
        monkeypatch.setattr(tma_conv, "few_tile_splits", lambda *args: splits)
    calls = _spy(monkeypatch)
    batch, size = 32, 7
    m = batch * size * size
    x, w, dy = _arrays(batch, size, cin, cout, dtype, 4)
    y = cupy.full((batch, size, size, cout), np.nan, dtype=x.dtype)
    dx = cupy.full(x.shape, np.nan, dtype=x.dtype)
    assert cupyconv.conv(x, w, layout="NHWC", out=y) is y
    assert cupyconv.conv_backward_data(dy, w, x.shape, layout="NHWC", out=dx) is dx
    _check(y, reference.conv(x.get(), w.get(), layout="NHWC"), dtype)
    _check(dx, reference.conv_backward_data(dy.get(), w.get(), x.shape, layout="NHWC"), dtype)
    again = cupyconv.conv(x, w, layout="NHWC", out=cupy.empty_like(y))  # (replays)
    assert bool((again == y).all())
    again = cupyconv.conv_backward_data(dy, w, x.shape, layout="NHWC", out=cupy.empty_like(dx))
    assert bool((again == dx).all())
    assert calls == [(m, cout, cin), (m, cin, cout)]  # (both passes on the TMA kernel)
    clear_caches()


@pytest.mark.parametrize("case", ["bias", "stride", "padding", "groups", "odd_channels",
                                  "channels_first", "view", "few_pixels", "switched_off"])
def test_pointwise_cases_that_keep_the_implicit_kernel(monkeypatch, case):
    import cupy

    import cupyconv
    from cupyconv import reference

    calls = _spy(monkeypatch)
    cin, cout, size, kw = 256, 64, 33, {}
    if case == "odd_channels":
        cin = 260  # rows of 520 bytes: not 16-byte multiples
    if case == "few_pixels":
        size = 9
    x, w, dy = _arrays(8, size, cin, cout, "float16", 2)
    layout = "NHWC"
    if case == "bias":
        kw["bias"] = cupy.asarray(random_array(np.random.default_rng(3), (cout,), "float16"))
    if case == "stride":
        kw["stride"] = 2
    if case == "padding":
        kw["padding"] = 1
    if case == "groups":
        kw["groups"] = 2
        w = w[:, :, :, :cin // 2].copy()
    if case == "channels_first":
        layout = "NCHW"
        x = cupy.ascontiguousarray(cupy.moveaxis(x, -1, 1))
        w = cupy.ascontiguousarray(cupy.moveaxis(w, -1, 1))
    if case == "view":  # C-contiguous arrays at an 8-byte offset
        x = _offset(x)
    if case == "switched_off":
        monkeypatch.setenv("CUPYCONV_TMA", "0")
    y = cupyconv.conv(x, w, layout=layout, **kw)
    _check(y, reference.conv(x.get(), w.get(), layout=layout, **kw), "float16")
    assert calls == []
    if kw.pop("bias", None) is not None:
        return  # (a forward option: the backward passes of that problem may take the GEMM)
    dy = cupy.ascontiguousarray(cupy.zeros(y.shape, y.dtype) + y)  # dy of the right shape
    if case == "view":
        dy = _offset(dy)
    dx = cupyconv.conv_backward_data(dy, w, x.shape, layout=layout, **kw)
    _check(dx, reference.conv_backward_data(dy.get(), w.get(), x.shape, layout=layout, **kw),
           "float16")
    dw = cupyconv.conv_backward_weight(x, dy, w.shape, layout=layout, **kw)
    _check(dw, reference.conv_backward_weight(x.get(), dy.get(), w.shape, layout=layout, **kw),
           "float16")
    # (odd channels: backward-weight takes the column route, _gemm/tma_columns, whose column
    # matrix pads each 260-channel row to 264; not the pointwise GEMM)
    pixels = 8 * size * size
    assert calls == ([(cout, 264, pixels)] if case == "odd_channels" else [])


@pytest.mark.parametrize("dtype", DTYPES)
def test_pointwise_nonfinite_inputs_reach_what_a_dense_product_gives(dtype):
    """A NaN in x reaches its pixel's row of y, an inf in w its output channel's column (inf
    times the other inputs, of both signs, sums to NaN there); as in PyTorch."""
    import cupy

    import cupyconv

    torch = pytest.importorskip("torch")
    x, w, dy = _arrays(2, 48, 256, 136, dtype, 4)
    x[0, 3, 5, 7] = np.nan
    w[9, 0, 0, 100] = np.inf
    dy[1, 2, 2, 11] = -np.inf
    y = cupyconv.conv(x, w, layout="NHWC")
    dx = cupyconv.conv_backward_data(dy, w, x.shape, layout="NHWC")
    tx, tw, tdy = (torch.from_dlpack(a).permute(0, 3, 1, 2) for a in (x, w, dy))
    ty = torch.nn.functional.conv2d(tx, tw).permute(0, 2, 3, 1)
    tdx = torch.nn.grad.conv2d_input(tuple(tx.shape), tw, tdy).permute(0, 2, 3, 1)
    for ours, theirs in ((y, ty), (dx, tdx)):
        theirs = cupy.from_dlpack(theirs.contiguous())
        assert bool((cupy.isnan(ours) == cupy.isnan(theirs)).all())
        assert bool((cupy.isinf(ours) == cupy.isinf(theirs)).all())
