"""Issue 47 item 1 on the GPU: PyTorch tensors on the warm path.  Each public pass and each
``cupyconv.cudnn`` function is called twice with fresh tensors of the same layout: the second
call must be a prepared call's replay (the first one's recording, not validation and planning
again), fed the tensors' own pointers (no CuPy view, no conversion) for the passes, and both
results must be those of the same call with CuPy arrays over the same memory, bit for bit.
Also: ``out=`` as a tensor is written (and comes back as a CuPy view of it), an ``out=`` that
overlaps an input is refused on the warm path as on the full one, bfloat16 tensors take the
warm path, and a channels-last tensor permuted to NHWC runs without a copy.

Skips where PyTorch or its CUDA is missing."""

import pytest

torch = pytest.importorskip("torch")

import cupyconv as cc  # noqa: E402
from cupyconv import cudnn  # noqa: E402
from cupyconv._core.foreign import ForeignArray  # noqa: E402
from cupyconv._dispatch import callcache  # noqa: E402

pytestmark = pytest.mark.gpu

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

# name: (call on a dict of arrays, {name: shape}); fresh tensors per round, same layouts
PASSES = {
    "conv": (lambda a: cc.conv(a["x"], a["w"], a["b"], padding=1),
             dict(x=(2, 8, 9, 9), w=(16, 8, 3, 3), b=(16,))),
    "conv-strided": (lambda a: cc.conv(a["x"], a["w"], stride=2, padding=(1, 2), dilation=2),
                     dict(x=(1, 6, 13, 12), w=(10, 6, 3, 3))),
    "conv_backward_data": (lambda a: cc.conv_backward_data(a["dy"], a["w"], (2, 8, 9, 9),
                                                           stride=2, padding=1),
                           dict(dy=(2, 16, 5, 5), w=(16, 8, 3, 3))),
    "conv_backward_weight": (lambda a: cc.conv_backward_weight(a["x"], a["dy"], (16, 8, 3, 3),
                                                               padding=1),
                             dict(x=(2, 8, 9, 9), dy=(2, 16, 9, 9))),
    "conv_transpose": (lambda a: cc.conv_transpose(a["x"], a["w"], a["b"], stride=2, padding=1,
                                                   output_padding=1),
                       dict(x=(2, 8, 5, 5), w=(8, 6, 3, 3), b=(6,))),
    "separable_conv": (lambda a: cc.separable_conv(a["x"], a["w_dw"], a["w_pw"], a["b_dw"],
                                                   a["b_pw"], padding=1, method="fused"),
                       dict(x=(2, 8, 9, 9), w_dw=(8, 1, 3, 3), w_pw=(12, 8, 1, 1), b_dw=(8,),
                            b_pw=(12,))),
}


@pytest.fixture(autouse=True)
def fresh():
    if not torch.cuda.is_available():
        pytest.skip("this PyTorch has no CUDA")
    callcache.clear()
    yield
    callcache.clear()


@pytest.fixture
def replays(monkeypatch):
    """Every prepared call made to run: (the call, its inputs, its out), in order."""
    seen = []
    real = callcache.PreparedCall.__call__

    def spy(self, inputs, out):
        seen.append((self, inputs, out))
        return real(self, inputs, out)

    monkeypatch.setattr(callcache.PreparedCall, "__call__", spy)
    return seen


def _tensor(shape, dtype, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.rand(shape, device="cuda", dtype=torch.float32, generator=gen) * 2 - 1).to(
        DTYPES[dtype])


def _cupy(t):
    """A CuPy view of tensor ``t`` (no copy), as a CuPy user would hold the same memory."""
    import cupy

    return cupy.from_dlpack(t.detach())


def _same(got, want):
    """Bit-for-bit equal (both views of results, CuPy arrays or tensors)."""
    import cupy

    got = got if isinstance(got, cupy.ndarray) else _cupy(got)
    want = want if isinstance(want, cupy.ndarray) else _cupy(want)
    assert got.shape == want.shape and got.dtype == want.dtype
    assert bool(cupy.all(got.view(cupy.uint16 if got.itemsize == 2 else cupy.uint32)
                         == want.view(cupy.uint16 if want.itemsize == 2 else cupy.uint32)))


def _warm(replays, foreign=True):
    """The last call was a prepared call's (no validation, no planning), handed the tensors as
    their descriptions (pointers, no views) where ``foreign``."""
    assert len(replays) == 1, f"{len(replays)} prepared calls ran, expected 1"
    if foreign:
        inputs = replays[0][1]
        assert any(isinstance(a, ForeignArray) for a in inputs), inputs


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("name", sorted(PASSES))
def test_tensors_take_the_warm_path(replays, name, dtype):
    import cupy

    op, shapes = PASSES[name]
    for round_ in range(2):
        tensors = {k: _tensor(s, dtype, 10 * round_ + i)
                   for i, (k, s) in enumerate(shapes.items())}
        replays.clear()
        got = op(tensors)
        if round_ == 0:
            assert not replays and len(callcache._calls) == 1  # the full path, remembered
        else:
            _warm(replays)
        assert type(got) is cupy.ndarray and got.dtype.name == dtype
        _same(got, op({k: _cupy(t) for k, t in tensors.items()}))


def test_out_as_a_tensor_is_written(replays):
    import cupy

    op, shapes = PASSES["conv"]
    for round_ in range(2):
        a = {k: _tensor(s, "float32", 5 + 10 * round_ + i)
             for i, (k, s) in enumerate(shapes.items())}
        out = torch.full((2, 16, 9, 9), float("nan"), device="cuda")
        replays.clear()
        y = cc.conv(a["x"], a["w"], a["b"], padding=1, out=out)
        if round_:
            _warm(replays)
            assert isinstance(replays[0][2], ForeignArray) and replays[0][0].recorded
        assert type(y) is cupy.ndarray and y.data.ptr == out.data_ptr()
        _same(out, op({k: _cupy(t) for k, t in a.items()}))


@pytest.mark.parametrize("name", ["conv", "conv_backward_data", "conv_transpose"])
def test_out_that_overlaps_an_input_is_refused_on_both_paths(replays, name):
    """1x1 filters with as many outputs as input channels: the output has an input's layout,
    and is that input.  The valid call prepares; the aliased one finds the prepared call and is
    refused before any work, as the full path refuses it."""
    x, w = _tensor((2, 4, 5, 5), "float32", 1), _tensor((4, 4, 1, 1), "float32", 2)
    call = {"conv": lambda out: cc.conv(x, w, out=out),
            "conv_backward_data": lambda out: cc.conv_backward_data(x, w, x.shape, out=out),
            "conv_transpose": lambda out: cc.conv_transpose(x, w, out=out)}[name]
    first = "dy" if name == "conv_backward_data" else "x"
    call(torch.empty_like(x))
    before = x.clone()
    replays.clear()
    message = rf"^out overlaps {first} in memory \({first} is read while out is written\)"
    with pytest.raises(ValueError, match=message):
        call(x)
    assert len(replays) == 1  # refused by the prepared call
    callcache.clear()
    with pytest.raises(ValueError, match=message):
        call(x)
    torch.cuda.synchronize()
    assert torch.equal(x, before)


def test_channels_last_tensors_run_as_nhwc_without_a_copy(replays):
    """A ``memory_format=torch.channels_last`` tensor permuted to NHWC is C-contiguous: it runs
    as layout="NHWC" at the tensor's own address; bfloat16, as PyTorch's fast layout."""
    for round_ in range(2):
        x = _tensor((2, 8, 9, 9), "bfloat16", 30 + round_).contiguous(
            memory_format=torch.channels_last)
        w = _tensor((16, 8, 3, 3), "bfloat16", 40 + round_).contiguous(
            memory_format=torch.channels_last)
        xl, wl = x.permute(0, 2, 3, 1), w.permute(0, 2, 3, 1)
        assert xl.is_contiguous() and xl.data_ptr() == x.data_ptr()
        replays.clear()
        y = cc.conv(xl, wl, padding=1, layout="NHWC")
        if round_:
            _warm(replays)
            assert replays[0][1][0].ptr == x.data_ptr()  # x itself, not a copy
        assert y.shape == (2, 9, 9, 16) and y.dtype.name == "bfloat16"
        _same(y, cc.conv(_cupy(xl), _cupy(wl), padding=1, layout="NHWC"))
        want = torch.nn.functional.conv2d(x.double(), w.double(), padding=1)
        got = torch.from_dlpack(y).permute(0, 3, 1, 2).double()
        assert float((got - want).norm() / want.norm()) < 1e-2


def _cudnn_call(function):
    opts = dict(pad=(1, 1), stride=(1, 1), dilation=(1, 1), groups=1, auto_tune=False,
                tensor_core="never")
    if function == "convolution_forward":
        return lambda t: cudnn.convolution_forward(t["x"], t["W"], t["b"], t["y"], **opts)
    if function == "convolution_backward_data":
        return lambda t: cudnn.convolution_backward_data(t["W"], t["x"], t["b"], t["y"],
                                                         deterministic=True, **opts)
    return lambda t: cudnn.convolution_backward_filter(t["x"], t["gy"], t["gW"],
                                                       deterministic=True, **opts)


CUDNN_SHAPES = {
    "convolution_forward": dict(x=(2, 8, 9, 9), W=(16, 8, 3, 3), b=(16,), y=(2, 16, 9, 9)),
    "convolution_backward_data": dict(W=(16, 8, 3, 3), x=(2, 16, 9, 9), b=(8,), y=(2, 8, 9, 9)),
    "convolution_backward_filter": dict(x=(2, 8, 9, 9), gy=(2, 16, 9, 9), gW=(16, 8, 3, 3)),
}
CUDNN_OUT = {"convolution_forward": "y", "convolution_backward_data": "y",
             "convolution_backward_filter": "gW"}


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("function", sorted(CUDNN_SHAPES))
def test_cudnn_functions_take_the_warm_path_with_tensors(replays, function, dtype):
    """The compat functions check their tensors' descriptions and hand them to cupyconv's
    passes as such (no CuPy views): the second call replays the pass's prepared call with the
    descriptions."""
    call = _cudnn_call(function)
    out = CUDNN_OUT[function]
    for round_ in range(2):
        t = {k: _tensor(s, dtype, 50 + 10 * round_ + i)
             for i, (k, s) in enumerate(CUDNN_SHAPES[function].items())}
        t[out].fill_(float("nan"))
        c = {k: _cupy(v) for k, v in t.items()}
        c[out] = _cupy(torch.full_like(t[out], float("nan")))
        replays.clear()
        assert call(t) is None
        if round_:
            _warm(replays)
        call(c)
        _same(t[out], c[out])
