"""Issue 21 on the GPU: complex convolutions against the complex128 reference, SciPy and
PyTorch's autograd; unbatched inputs; ``cupyconv.cudnn`` against cupyconv's own passes and
PyTorch float64; PyTorch tensors in, CuPy arrays out, without a copy."""

import zlib

import numpy as np
import pytest

import cupyconv
from cupyconv import cudnn, jit, reference
from cupyconv._core.arrays import require_array
from cupyconv._core.verify import poison, random_array, rel_error
from cupyconv._dispatch import callcache

import cudnn_cases as cc

pytestmark = pytest.mark.gpu

COMPLEX_TOL = {"complex64": 5e-5, "complex128": 1e-11}
# (x shape NCHW, w shape NCHW, options): 1-, 2- and 3-d, groups, stride, dilation, padding forms
COMPLEX_CASES = [
    ((2, 4, 9, 8), (6, 2, 3, 3), dict(padding=1, groups=2)),
    ((1, 3, 17), (2, 3, 4), dict(stride=2, padding=[(2, 1)], dilation=2)),
    ((1, 2, 5, 4, 6), (3, 2, 2, 3, 2), dict(padding=(1, 0, 1), stride=(1, 2, 1))),
]


def _crand(rng, shape, dtype):
    real = random_array(rng, shape, "float64") + 1j * random_array(rng, shape, "float64")
    return real.astype(dtype)


def _crel(out, ref):
    out = out.get() if hasattr(out, "get") else np.asarray(out)
    ref = np.asarray(ref, np.complex128)
    assert out.shape == ref.shape
    return float(np.linalg.norm((out.astype(np.complex128) - ref).ravel()) / np.linalg.norm(ref))


def _layout(shape, layout):
    """An NCHW shape in ``layout`` (channels moved last for NHWC)."""
    return shape if layout == "NCHW" else (shape[0], *shape[2:], shape[1])


def _case(case, layout):
    xs, ws, opts = case
    return _layout(xs, layout), _layout(ws, layout), dict(opts, layout=layout)


# ------------------------------------------------------------------------------ complex
@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", COMPLEX_CASES, ids=["2d", "1d", "3d"])
def test_complex_passes_match_the_complex128_reference(case, layout, dtype):
    import cupy

    rng = np.random.default_rng(zlib.crc32(f"{case}-{layout}-{dtype}".encode()))
    xs, ws, opts = _case(case, layout)
    x, w = _crand(rng, xs, dtype), _crand(rng, ws, dtype)
    b = _crand(rng, (ws[0],), dtype)
    tol = COMPLEX_TOL[dtype]

    ref = reference.conv(x, w, b, **opts)
    y = poison(cupy.empty(ref.shape, dtype))
    got = cupyconv.conv(cupy.asarray(x), cupy.asarray(w), cupy.asarray(b), out=y, **opts)
    assert got is y and y.dtype == dtype and _crel(y, ref) <= tol

    dy = _crand(rng, ref.shape, dtype)
    dx = cupyconv.conv_backward_data(cupy.asarray(dy), cupy.asarray(w), xs, **opts)
    assert dx.dtype == dtype
    assert _crel(dx, reference.conv_backward_data(dy, w, xs, **opts)) <= tol
    dw = cupyconv.conv_backward_weight(cupy.asarray(x), cupy.asarray(dy), ws, **opts)
    assert dw.dtype == dtype
    assert _crel(dw, reference.conv_backward_weight(x, dy, ws, **opts)) <= tol

    # the transposed convolution of dy by w is backward-data with w unconjugated
    topts = {k: v for k, v in opts.items() if k != "padding"}
    bt = _crand(rng, (case[1][1] * opts.get("groups", 1),), dtype)  # C_out of the transpose
    yt = cupyconv.conv_transpose(cupy.asarray(dy), cupy.asarray(w), cupy.asarray(bt), **topts)
    assert _crel(yt, reference.conv_transpose(dy, w, bt, **topts)) <= tol


def test_complex_forward_matches_scipy():
    """scipy.signal.convolve of complex data is the plain bilinear product; cupyconv's conv is a
    cross-correlation, so the kernel is flipped for the comparison."""
    import cupy
    from scipy import signal

    rng = np.random.default_rng(5)
    x, w = _crand(rng, (1, 2, 12, 10), "complex128"), _crand(rng, (3, 2, 4, 3), "complex128")
    y = cupyconv.conv(cupy.asarray(x), cupy.asarray(w)).get()
    want = np.stack([sum(signal.convolve(x[0, c], w[k, c, ::-1, ::-1], mode="valid")
                         for c in range(2)) for k in range(3)])[None]
    assert _crel(y, want) <= 1e-12


def test_complex_gradients_follow_pytorch_autograd():
    torch = pytest.importorskip("torch")
    import cupy

    rng = np.random.default_rng(6)
    x, w = _crand(rng, (2, 4, 8, 7), "complex128"), _crand(rng, (6, 2, 3, 2), "complex128")
    opts = dict(stride=(2, 1), padding=1, dilation=(1, 2), groups=2)
    xt = torch.tensor(x, requires_grad=True)
    wt = torch.tensor(w, requires_grad=True)
    yt = torch.nn.functional.conv2d(xt, wt, **opts)
    dy = _crand(rng, tuple(yt.shape), "complex128")
    yt.backward(torch.tensor(dy))
    y = cupyconv.conv(cupy.asarray(x), cupy.asarray(w), **opts)
    assert _crel(y, yt.detach().numpy()) <= 1e-12
    dx = cupyconv.conv_backward_data(cupy.asarray(dy), cupy.asarray(w), x.shape, **opts)
    assert _crel(dx, xt.grad.numpy()) <= 1e-12
    dw = cupyconv.conv_backward_weight(cupy.asarray(x), cupy.asarray(dy), w.shape, **opts)
    assert _crel(dw, wt.grad.numpy()) <= 1e-12


def test_complex_refusals_come_before_any_work():
    import cupy

    x = cupy.zeros((1, 2, 6, 6), cupy.complex64)
    w = cupy.zeros((3, 2, 3, 3), cupy.complex64)
    out = poison(cupy.empty((1, 3, 4, 4), cupy.complex64))
    with pytest.raises(ValueError, match="activation 'relu' is not defined for complex"):
        cupyconv.conv(x, w, activation="relu", out=out)
    with pytest.raises(TypeError, match="w has dtype float32 but the call is complex"):
        cupyconv.conv(x, w.real.astype(cupy.float32), out=out)
    with pytest.raises(TypeError, match="bias has dtype complex128"):
        cupyconv.conv(x, w, cupy.zeros(3, cupy.complex128), out=out)
    with pytest.raises(ValueError, match="in_channels / groups"):
        cupyconv.conv(x, w[:, :1], out=out)
    with pytest.raises(ValueError, match="method must be one of"):
        cupyconv.conv_backward_data(out, w, x.shape, method="nope")
    assert bool(cupy.isnan(out.real).all())


# ------------------------------------------------------------------------------ unbatched
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_unbatched_inputs_give_unbatched_results(layout):
    import cupy

    rng = np.random.default_rng(7)
    xs, ws, opts = _case(((1, 4, 10, 9), (6, 2, 3, 3), dict(padding=1, stride=2, groups=2)),
                         layout)
    x = cupy.asarray(random_array(rng, xs))
    w = cupy.asarray(random_array(rng, ws))
    b = cupy.asarray(random_array(rng, (6,)))
    batched = cupyconv.conv(x, w, b, **opts)
    y = cupyconv.conv(x[0], w, b, **opts)
    assert y.shape == batched.shape[1:] and bool((y == batched[0]).all())
    y2 = cupyconv.conv2d(x[0], w, b, **opts)
    assert bool((y2 == batched[0]).all())
    out = poison(cupy.empty(batched.shape[1:], cupy.float32))
    assert cupyconv.conv(x[0], w, b, out=out, **opts) is out and bool((out == y).all())

    dy = cupy.asarray(random_array(rng, batched.shape))
    dx = cupyconv.conv_backward_data(dy[0], w, xs[1:], **opts)
    assert dx.shape == xs[1:]
    assert bool((dx == cupyconv.conv_backward_data(dy, w, xs, **opts)[0]).all())
    dw = cupyconv.conv_backward_weight(x[0], dy[0], ws, **opts)
    assert bool((dw == cupyconv.conv_backward_weight(x, dy, ws, **opts)).all())

    topts = {k: v for k, v in opts.items() if k != "padding"}
    wt = cupy.asarray(random_array(rng, _layout((6, 3, 3, 3), layout)))
    yt = cupyconv.conv_transpose(dy[0], wt, **topts)
    assert bool((yt == cupyconv.conv_transpose(dy, wt, **topts)[0]).all())

    wd = cupy.asarray(random_array(rng, _layout((4, 1, 3, 3), layout)))
    wp = cupy.asarray(random_array(rng, _layout((5, 4, 1, 1), layout)))
    ys = cupyconv.separable_conv(x[0], wd, wp, padding=1, layout=layout)
    assert bool((ys == cupyconv.separable_conv(x, wd, wp, padding=1, layout=layout)[0]).all())


def test_unbatched_1d_and_complex():
    import cupy

    rng = np.random.default_rng(8)
    x, w = _crand(rng, (3, 20), "complex64"), _crand(rng, (2, 3, 5), "complex64")
    y = cupyconv.conv1d(cupy.asarray(x), cupy.asarray(w), padding="same")
    assert y.shape == (2, 20)
    assert _crel(y, reference.conv(x[None], w, padding="same")[0]) <= COMPLEX_TOL["complex64"]
    with pytest.raises(ValueError, match="dims"):
        cupyconv.conv(cupy.asarray(x)[0], cupy.asarray(w))  # two dims short of the weight


# ------------------------------------------------------------------------------ cupyconv.cudnn
def _torch64(a):
    import torch

    return torch.from_numpy(a.get().astype(np.float64))


CUDNN_CASES = [
    ((2, 4, 11, 10), (6, 2, 3, 3), (1, 1), (2, 1), (1, 1), 2),
    ((1, 3, 9, 9), (4, 3, 3, 3), (2, 2), (1, 1), (2, 2), 1),
    ((2, 2, 13), (3, 2, 4), (1,), (3,), (1,), 1),
    ((1, 2, 5, 6, 7), (2, 2, 3, 2, 3), (1, 0, 1), (1, 1, 2), (1, 1, 1), 1),
]


@pytest.mark.parametrize("case", CUDNN_CASES, ids=["2d-g2", "2d-dil", "1d", "3d"])
def test_cudnn_functions_match_cupyconv_and_torch(case):
    import cupy

    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    xs, ws, pad, stride, dilation, groups = case
    nsp = len(xs) - 2
    rng = np.random.default_rng(9)
    x, w = cupy.asarray(random_array(rng, xs)), cupy.asarray(random_array(rng, ws))
    b = cupy.asarray(random_array(rng, (ws[0],)))
    opts = dict(stride=stride, padding=pad, dilation=dilation, groups=groups)
    ys = cupyconv.output_shape(xs, ws, **opts)
    conv_t = getattr(F, f"conv{nsp}d")
    grad = torch.nn.grad

    y = poison(cupy.empty(ys, cupy.float32))
    assert cudnn.convolution_forward(x, w, b, y, pad, stride, dilation, groups, auto_tune=True,
                                     tensor_core="auto") is None
    assert rel_error(y, cupyconv.conv(x, w, b, **opts)) <= 1e-6
    want = conv_t(_torch64(x), _torch64(w), _torch64(b), **opts).numpy()
    assert rel_error(y, want) <= 1e-5

    gy = cupy.asarray(random_array(rng, ys))
    gx = poison(cupy.empty(xs, cupy.float32))
    bx = cupy.asarray(random_array(rng, (xs[1],)))
    cudnn.convolution_backward_data(w, gy, bx, gx, pad, stride, dilation, groups,
                                    deterministic=True, auto_tune=False, tensor_core="never")
    want = getattr(grad, f"conv{nsp}d_input")(xs, _torch64(w), _torch64(gy), **opts).numpy()
    want += bx.get().astype(np.float64).reshape((-1,) + (1,) * nsp)
    assert rel_error(gx, want) <= 1e-5

    gw = poison(cupy.empty(ws, cupy.float32))
    cudnn.convolution_backward_filter(x, gy, gw, pad, stride, dilation, groups,
                                      deterministic=False, auto_tune=False, tensor_core="auto")
    assert rel_error(gw, cupyconv.conv_backward_weight(x, gy, ws, **opts)) <= 1e-6
    want = getattr(grad, f"conv{nsp}d_weight")(_torch64(x), ws, _torch64(gy), **opts).numpy()
    assert rel_error(gw, want) <= 1e-5


def test_cudnn_layouts_and_strided_outputs():
    """NHWC data with an NCHW filter (and the reverse for gW), a flipped (negative-stride) filter
    as sigpy passes, and outputs that are not C-contiguous."""
    import cupy

    rng = np.random.default_rng(10)
    x = cupy.asarray(random_array(rng, (2, 7, 8, 3)))          # NHWC
    w = cupy.asarray(random_array(rng, (4, 3, 3, 3)))[:, :, ::-1, ::-1]  # NCHW, flipped view
    b = cupy.asarray(random_array(rng, (4,)))
    nhwc, nchw = cudnn.CUDNN_TENSOR_NHWC, cudnn.CUDNN_TENSOR_NCHW
    want = cupyconv.conv(x, cupy.moveaxis(w, 1, -1), b, padding=1, layout="NHWC")
    y = cupy.full((2, 4, 7, 8), cupy.nan, cupy.float32).transpose(0, 2, 3, 1)  # NHWC view
    cudnn.convolution_forward(x, w, b, y, (1, 1), (1, 1), (1, 1), 1, auto_tune=False,
                              tensor_core="never", d_layout=nhwc, w_layout=nchw)
    assert rel_error(y, want) <= 1e-6

    gw = cupy.full((4, 3, 3, 3), cupy.nan, cupy.float32)      # NCHW, data NHWC
    cudnn.convolution_backward_filter(x, want, gw, (1, 1), (1, 1), (1, 1), 1,
                                      deterministic=True, auto_tune=False, tensor_core="auto",
                                      d_layout=nhwc, w_layout=nchw)
    ref = reference.conv_backward_weight(x.get(), want.get(), (4, 3, 3, 3), padding=1,
                                         layout="NHWC")
    assert rel_error(cupy.moveaxis(gw, 1, -1), ref) <= 1e-5


def test_cudnn_complex_is_the_gradient_convention():
    """sigpy's adjoint built from four real cuDNN calls with conj(filt) is one complex call."""
    import cupy

    rng = np.random.default_rng(11)
    out = _crand(rng, (1, 2, 10, 10), "complex64")
    filt = _crand(rng, (2, 3, 3, 3), "complex64")
    data = cupy.empty((1, 3, 12, 12), cupy.complex64)
    cudnn.convolution_backward_data(cupy.asarray(filt), cupy.asarray(out), None, data, (0, 0),
                                    (1, 1), (1, 1), 1, deterministic=False, auto_tune=True,
                                    tensor_core="auto")
    parts = [reference.conv_backward_data(o, f, (1, 3, 12, 12))
             for o, f in ((out.real, filt.real), (out.imag, filt.imag), (out.imag, filt.real),
                          (out.real, filt.imag))]
    sigpy = (parts[0] + parts[1]) + 1j * (parts[2] - parts[3])  # B(out, conj(filt))
    assert _crel(data, sigpy) <= COMPLEX_TOL["complex64"]


def test_cudnn_bad_bias_is_refused_before_work():
    import cupy

    w = cupy.ones((4, 2, 3, 3), cupy.float32)
    gy = cupy.ones((1, 4, 3, 3), cupy.float32)
    gx = poison(cupy.empty((1, 2, 5, 5), cupy.float32))
    with pytest.raises(ValueError, match="b must have one value per channel of y"):
        cudnn.convolution_backward_data(w, gy, cupy.ones(3, cupy.float32), gx, (0, 0), (1, 1),
                                        (1, 1), 1, deterministic=False, auto_tune=False,
                                        tensor_core="auto")
    assert bool(cupy.isnan(gx).all())


# ------------------------------------------------------------------------------ cudnn: names
def _gpu_arrays():
    import contextlib

    import cupy

    @contextlib.contextmanager
    def device(i):
        with cupy.cuda.Device(i):
            yield

    return cc.Arrays(lambda shape, dtype, fill: cupy.full(shape, fill, dtype), device,
                     lambda a: a.get() if isinstance(a, cupy.ndarray) else np.asarray(a))


@pytest.mark.parametrize("case", cc.CASES, ids=[c.id for c in cc.CASES])
def test_cudnn_errors_name_cupy13_arguments(case):
    """Issue 45 class 4: each bad argument of cupyconv.cudnn raises before any kernel is fetched,
    compiled or launched, with a message in CuPy 13's names (tests/cudnn_cases.py; the same
    cases run on the CPU in test_compat.py), and the output keeps its contents."""
    import cupy

    if cupy.cuda.runtime.getDeviceCount() < case.gpus:
        pytest.skip(f"needs {case.gpus} GPUs")
    a = _gpu_arrays()
    args = case.arguments(a)
    target = args[cc.OUTPUT[case.function]]
    cupy.cuda.Device().synchronize()
    before = a.to_host(target).copy()
    stats = jit.cache_info()
    with pytest.raises(case.error) as info:
        cc.call(case.function, args)
    cc.check_message(str(info.value), case)
    after = jit.cache_info()
    assert (after["hits"], after["misses"]) == (stats["hits"], stats["misses"]), (
        "a kernel was fetched before the error")
    cupy.cuda.Device().synchronize()
    assert np.array_equal(a.to_host(target), before, equal_nan=True), "the output was written"


@pytest.mark.parametrize("function", ["forward", "backward_data", "backward_filter"])
def test_cudnn_warm_call_overlap_names_cupy13_arguments(function):
    """The warm path (a prepared call after a valid call like it) checks only the overlap of
    the output with the inputs: its message names CuPy 13's arguments too.  1x1 filters, as
    many output as input channels and one pixel for the filter pass: the output has the shape,
    strides and alignment of an input, and is that input."""
    import cupy

    a = _gpu_arrays()
    opts = dict(pad=(0, 0), stride=(1, 1), dilation=None, groups=1, tensor_core="auto",
                d_layout=0, w_layout=0)
    if function == "forward":
        args = dict(x=a.zeros((2, 4, 5, 5)), W=a.zeros((4, 4, 1, 1)), b=None,
                    y=a.out((2, 4, 5, 5)), **opts)
        aliased, names = dict(y=args["x"]), ("y", "x")
    elif function == "backward_data":
        args = dict(W=a.zeros((4, 4, 1, 1)), x=a.zeros((2, 4, 5, 5)), b=None,
                    y=a.out((2, 4, 5, 5)), **opts)
        aliased, names = dict(y=args["x"]), ("y", "x")
    else:
        args = dict(x=a.zeros((4, 4, 1, 1)), gy=a.zeros((4, 4, 1, 1)), gW=a.out((4, 4, 1, 1)),
                    **opts)
        aliased, names = dict(gW=args["gy"]), ("gW", "gy")
    assert cc.call(function, args) is None               # valid: prepares the call
    assert callcache._calls, "the valid call was not remembered: no warm path to test"
    cupy.cuda.Device().synchronize()
    source = next(iter(aliased.values()))
    before = source.get()
    case = cc.Case(function, "warm-overlap", ValueError, names, lambda _: aliased)
    with pytest.raises(ValueError) as info:
        cc.call(function, {**args, **aliased})
    cc.check_message(str(info.value), case)
    assert str(info.value).startswith(f"{names[0]} overlaps {names[1]} in memory")
    cupy.cuda.Device().synchronize()
    assert np.array_equal(source.get(), before)


# ------------------------------------------------------------------------------ interop
def test_torch_tensors_in_cupy_out_without_a_copy():
    torch = pytest.importorskip("torch")
    import cupy

    if not torch.cuda.is_available():
        pytest.skip("this PyTorch has no CUDA")
    gen = torch.Generator(device="cuda").manual_seed(0)
    xt = torch.rand((2, 3, 9, 9), device="cuda", generator=gen)
    wt = torch.rand((4, 3, 3, 3), device="cuda", generator=gen)
    assert require_array(xt, "x").data.ptr == xt.data_ptr()       # a view, not a copy
    y = cupyconv.conv(xt, wt, padding=1)
    assert isinstance(y, cupy.ndarray)
    want = cupyconv.conv(cupy.asarray(xt), cupy.asarray(wt), padding=1)
    assert bool((y == want).all())

    out_t = torch.full((2, 4, 9, 9), float("nan"), device="cuda")
    got = cupyconv.conv(xt, wt, padding=1, out=out_t)
    assert isinstance(got, cupy.ndarray) and got.data.ptr == out_t.data_ptr()
    cupy.cuda.get_current_stream().synchronize()
    assert torch.equal(out_t, torch.as_tensor(want, device="cuda"))

    class DLPackOnly:  # a producer with DLPack and no __cuda_array_interface__ (as JAX can be)
        def __init__(self, t):
            self.t = t

        def __dlpack__(self, *args, **kwargs):
            return self.t.__dlpack__(*args, **kwargs)

        def __dlpack_device__(self):
            return self.t.__dlpack_device__()

    h = torch.rand((2, 3, 9, 9), device="cuda", generator=gen).half()
    assert require_array(DLPackOnly(h), "x").data.ptr == h.data_ptr()
    yh = cupyconv.conv(DLPackOnly(h), wt.half(), padding=1)
    assert yh.dtype == cupy.float16
    assert bool((yh == cupyconv.conv(cupy.asarray(h), cupy.asarray(wt.half()), padding=1)).all())

    with pytest.raises(TypeError, match="x .*could not be viewed"):
        cupyconv.conv(xt.clone().requires_grad_(), wt)
    with pytest.raises(TypeError, match=r"x must be a cupy.ndarray.*cupy.asarray\(x\)"):
        cupyconv.conv(xt.cpu(), wt)
