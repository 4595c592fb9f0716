"""CPU checks of issue 21's ecosystem fit: the ``cupyconv.cudnn`` surface (signatures, constants,
argument errors), complex arithmetic and conjugation rules (on the float64 reference, with NumPy
standing in for CuPy), the unbatched-input rule, and the routing of other libraries' GPU arrays
to CuPy views.  The GPU results are in test_gpu_compat.py."""

import contextlib
import inspect
import sys
import types

import numpy as np
import pytest

import cupyconv
from cupyconv import cudnn, reference
from cupyconv._core import arrays
from cupyconv._core.complex import bias_parts, gauss_product, require_complex_dtype

import cudnn_cases as cc


def _rand(rng, shape, complex_=True):
    a = rng.uniform(-1, 1, shape)
    return a + 1j * rng.uniform(-1, 1, shape) if complex_ else a


# ------------------------------------------------------------------------------ cupyconv.cudnn
# CuPy 13's cupy/cudnn.pyx: parameter names, order and kinds (positional, then keyword-only).
CUPY13_SIGNATURES = {
    "convolution_forward": (
        ["x", "W", "b", "y", "pad", "stride", "dilation", "groups"],
        ["auto_tune", "tensor_core", "d_layout", "w_layout"]),
    "convolution_backward_data": (
        ["W", "x", "b", "y", "pad", "stride", "dilation", "groups"],
        ["deterministic", "auto_tune", "tensor_core", "d_layout", "w_layout"]),
    "convolution_backward_filter": (
        ["x", "gy", "gW", "pad", "stride", "dilation", "groups"],
        ["deterministic", "auto_tune", "tensor_core", "d_layout", "w_layout"]),
}


@pytest.mark.parametrize("name", sorted(CUPY13_SIGNATURES))
def test_cudnn_signatures_match_cupy13(name):
    positional, keyword = CUPY13_SIGNATURES[name]
    params = inspect.signature(getattr(cudnn, name)).parameters.values()
    got_pos = [p.name for p in params if p.kind == p.POSITIONAL_OR_KEYWORD]
    got_kw = [p.name for p in params if p.kind == p.KEYWORD_ONLY]
    assert got_pos == positional and got_kw == keyword
    defaults = {p.name: p.default for p in params if p.default is not p.empty}
    # as in CuPy 13: only the layouts have defaults (NCHW); the rest must be passed
    assert defaults == {"d_layout": cudnn.CUDNN_TENSOR_NCHW, "w_layout": cudnn.CUDNN_TENSOR_NCHW}


def test_cudnn_constants_and_module_surface():
    # cudnnTensorFormat_t values, as cupy.cuda.cudnn exposed them
    assert (cudnn.CUDNN_TENSOR_NCHW, cudnn.CUDNN_TENSOR_NHWC) == (0, 1)
    assert cupyconv.cudnn is cudnn and "cudnn" in cupyconv.__all__
    before = cudnn.get_max_workspace_size()
    assert before == 8 * 1024 * 1024
    try:
        cudnn.set_max_workspace_size(1 << 20)
        assert cudnn.get_max_workspace_size() == 1 << 20
        with pytest.raises(ValueError, match="size must be >= 0"):
            cudnn.set_max_workspace_size(-1)
    finally:
        cudnn.set_max_workspace_size(before)


CALLS = {
    "convolution_forward": lambda **kw: cudnn.convolution_forward(
        None, None, None, None, (1, 1), (1, 1), (1, 1), 1, **kw),
    "convolution_backward_data": lambda **kw: cudnn.convolution_backward_data(
        None, None, None, None, (1, 1), (1, 1), (1, 1), 1, deterministic=False, **kw),
    "convolution_backward_filter": lambda **kw: cudnn.convolution_backward_filter(
        None, None, None, (1, 1), (1, 1), (1, 1), 1, deterministic=False, **kw),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_cudnn_option_errors_come_first(name):
    """Bad options are refused by name before any array is looked at (the arrays here are None)."""
    call = CALLS[name]
    with pytest.raises(ValueError, match="tensor_core must be one of 'always', 'auto' or 'never'"):
        call(auto_tune=False, tensor_core="sometimes")
    with pytest.raises(ValueError, match=r"d_layout must be CUDNN_TENSOR_NCHW \(0\) or "):
        call(auto_tune=False, tensor_core="auto", d_layout=2)  # CUDNN_TENSOR_NCHW_VECT_C
    with pytest.raises(ValueError, match="w_layout must be"):
        call(auto_tune=False, tensor_core="never", w_layout=True)
    with pytest.raises(TypeError, match="must be a cupy.ndarray"):
        call(auto_tune=True, tensor_core="always")


def test_cudnn_numpy_output_is_refused_with_a_hint():
    y = np.zeros((1, 2, 3, 3), np.float32)
    with pytest.raises(TypeError, match=r"y must be a cupy.ndarray.*cupy.asarray\(y\)"):
        cudnn.convolution_forward(y, y, None, y, (0, 0), (1, 1), (1, 1), 1, auto_tune=False,
                                  tensor_core="auto")


# ------------------------------------------------------------------------------ cudnn: names
# Issue 45 class 4: every error of cupyconv.cudnn names the argument as CuPy 13 did.  The cases
# (tests/cudnn_cases.py) run here on NumPy arrays posing as CuPy arrays, with the launch replaced
# by a sentinel, so every check before it runs as on a GPU; test_gpu_compat.py runs them on one.
class _Launched(Exception):
    """Raised where a call would compile or launch its first kernel."""


class _FakeGpuArray(np.ndarray):
    """A NumPy array with what cupyconv's checks read of a cupy.ndarray: ``data.ptr``,
    ``data.device_id`` and ``device`` (a context)."""

    def __array_finalize__(self, obj):
        self.device_id = getattr(obj, "device_id", 0)

    @property
    def data(self):
        return types.SimpleNamespace(ptr=self.__array_interface__["data"][0],
                                     device_id=self.device_id)

    @property
    def device(self):
        return contextlib.nullcontext()


@pytest.fixture
def fake_gpu(monkeypatch):
    """cudnn_cases.Arrays of _FakeGpuArray, with a ``cupy`` module that knows them; kernels are
    never reached (conv's algorithm choice and the backward passes' prepare raise _Launched)."""
    import importlib

    from cupyconv._dispatch.backward import BackwardAlgorithm

    conv_module = importlib.import_module("cupyconv.conv")  # (cupyconv.conv is the function)

    current = [0]

    def new(shape, dtype, fill):
        a = np.full(shape, fill, dtype).view(_FakeGpuArray)
        a.device_id = current[0]
        return a

    @contextlib.contextmanager
    def device(i):
        current[0], before = i, current[0]
        try:
            yield
        finally:
            current[0] = before

    fake = types.ModuleType("cupy")
    fake.ndarray = _FakeGpuArray
    fake.moveaxis = np.moveaxis
    fake.empty = lambda shape, dtype=None: new(shape, dtype, 0)
    monkeypatch.setitem(sys.modules, "cupy", fake)

    def launched(*args, **kwargs):
        raise _Launched

    monkeypatch.setattr(conv_module, "choose", launched)
    monkeypatch.setattr(BackwardAlgorithm, "prepare_data", launched)
    monkeypatch.setattr(BackwardAlgorithm, "prepare_weight", launched)
    return cc.Arrays(new, device, np.asarray)


@pytest.mark.parametrize("function", ["forward", "backward_data", "backward_filter"])
@pytest.mark.parametrize("layouts", [(0, 0), (1, 1), (1, 0), (0, 1)],
                         ids=["NCHW", "NHWC", "NHWC-w_NCHW", "NCHW-w_NHWC"])
def test_cudnn_valid_calls_reach_the_launch(fake_gpu, function, layouts):
    """The base call of the cases passes every check (so a case fails by its one change), in
    each data and filter layout."""
    args = cc.base(function, fake_gpu)
    d, w = layouts
    a = fake_gpu
    if d == 1:  # channels-last data
        args.update(x=a.zeros((2, 9, 9, 4) if function != "backward_data" else (2, 9, 9, 6)))
        if function == "forward":
            args["y"] = a.out((2, 9, 9, 6))
        elif function == "backward_data":
            args["y"] = a.out((2, 9, 9, 4))
        else:
            args["gy"] = a.zeros((2, 9, 9, 6))
    if w == 1:  # the filter channels-last: (K, kh, kw, C/groups)
        args["gW" if function == "backward_filter" else "W"] = (
            a.out((6, 3, 3, 2)) if function == "backward_filter" else a.zeros((6, 3, 3, 2)))
    args.update(d_layout=d, w_layout=w)
    with pytest.raises(_Launched):
        cc.call(function, args)


@pytest.mark.parametrize("case", cc.CASES, ids=[c.id for c in cc.CASES])
def test_cudnn_errors_name_cupy13_arguments(fake_gpu, case):
    args = case.arguments(fake_gpu)
    target = args[cc.OUTPUT[case.function]]
    before = np.array(target, copy=True)
    with pytest.raises(case.error) as info:
        cc.call(case.function, args)
    cc.check_message(str(info.value), case)
    assert np.array_equal(np.asarray(target), before, equal_nan=True), "the output was written"


def test_cudnn_cases_cover_every_function_and_are_unique():
    ids = [c.id for c in cc.CASES]
    assert len(ids) == len(set(ids))
    assert {c.function for c in cc.CASES} == set(cc.OUTPUT)
    assert len(cc.CASES) >= 90


def test_cudnn_warm_path_overlap_names_cupy13_arguments(fake_gpu):
    """A warm call (a prepared call's replay) checks only that the output overlaps no input;
    under the compat module's names that message speaks CuPy 13 too."""
    from cupyconv._dispatch.callcache import PreparedCall

    fake = sys.modules["cupy"]
    fake.cuda = types.SimpleNamespace(runtime=types.SimpleNamespace(getDevice=lambda: 0))
    x, y = fake_gpu.overlapping((2, 6, 9, 9), (2, 4, 9, 9))
    call = PreparedCall(lambda ops: None, y.shape, y.dtype, 0, ("dy", "w"), recorded=True)
    with cudnn._spoken_as("convolution_backward_data", "NCHW", "NCHW"):
        with pytest.raises(ValueError) as info:
            call((x, fake_gpu.zeros((6, 2, 3, 3))), y)
    assert str(info.value).startswith("y overlaps x in memory (x is read while y is written)")
    with pytest.raises(ValueError, match=r"^out overlaps dy .*, or out=None$"):
        call((x, fake_gpu.zeros((6, 2, 3, 3))), y)   # cupyconv's own names outside


def test_argument_names_are_scoped():
    from cupyconv._core.geometry import ConvGeometry
    from cupyconv._core.names import arg, spoken_as

    assert arg("padding") == "padding" and arg("input", "the input") == "the input"
    with spoken_as({"padding": "pad", "input": "x"}):
        assert arg("padding") == "pad" and arg("input", "the input") == "x"
        assert arg("stride") == "stride"
        with spoken_as({"stride": "strides"}):       # the innermost map, whole
            assert arg("stride") == "strides" and arg("padding") == "padding"
        with pytest.raises(ValueError, match=r"^pad must be >= 0"):
            ConvGeometry.from_shapes((1, 2, 5, 5), (3, 2, 3, 3), padding=-1)
        assert arg("padding") == "pad"
    assert arg("padding") == "padding"                # reset, after an error too
    with pytest.raises(ValueError, match=r"^padding must be >= 0"):
        ConvGeometry.from_shapes((1, 2, 5, 5), (3, 2, 3, 3), padding=-1)


def test_argument_names_do_not_leak_across_threads():
    import threading

    from cupyconv._core.names import arg, spoken_as

    seen = []
    with spoken_as({"out": "y"}):
        thread = threading.Thread(target=lambda: seen.append(arg("out")))
        thread.start()
        thread.join()
    assert seen == ["out"]


# ------------------------------------------------------------------------------ complex
def test_complex_reference_is_the_bilinear_product_and_matches_scipy():
    from scipy import signal

    rng = np.random.default_rng(0)
    x, w = _rand(rng, (2, 3, 7, 6)), _rand(rng, (4, 3, 3, 2))
    b = _rand(rng, (4,))
    y = reference.conv(x, w, b, padding=1)
    assert y.dtype == np.complex128
    # scipy.signal.correlate conjugates its second argument: give it conj(w) for the plain product
    want = np.stack([np.stack([
        sum(signal.correlate(np.pad(x[n, c], 1), np.conj(w[k, c]), mode="valid") for c in range(3))
        + b[k] for k in range(4)]) for n in range(2)])
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
    # and the four real products
    parts = (reference.conv(x.real, w.real, padding=1) - reference.conv(x.imag, w.imag, padding=1)
             + 1j * (reference.conv(x.real, w.imag, padding=1)
                     + reference.conv(x.imag, w.real, padding=1)))
    np.testing.assert_allclose(y - b.reshape(1, 4, 1, 1), parts, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_complex_reference_gradients_are_adjoints(layout):
    """<conv(x, w), dy> = <x, bwd_data(dy, w)> = <w, bwd_weight(x, dy)> with <a, b> = sum(conj(a) b):
    the gradients conjugate (PyTorch's convention)."""
    rng = np.random.default_rng(1)
    opts = dict(stride=2, padding=1, dilation=(1, 2), groups=2, layout=layout)
    xs, ws = ((2, 4, 9, 8), (6, 2, 3, 2)) if layout == "NCHW" else ((2, 9, 8, 4), (6, 3, 2, 2))
    x, w = _rand(rng, xs), _rand(rng, ws)
    y = reference.conv(x, w, **opts)
    dy = _rand(rng, y.shape)
    lhs = np.vdot(y, dy)
    assert np.isclose(lhs, np.vdot(x, reference.conv_backward_data(dy, w, xs, **opts)), rtol=1e-12)
    assert np.isclose(lhs, np.vdot(w, reference.conv_backward_weight(x, dy, ws, **opts)),
                      rtol=1e-12)
    with pytest.raises(ValueError, match="not defined for complex"):
        reference.conv(x, w, activation="relu", **opts)


@pytest.fixture
def numpy_as_cupy(monkeypatch):
    """gauss_product's combining ufuncs on NumPy arrays: NumPy stands in for CuPy."""
    fake = types.ModuleType("cupy")
    fake.add, fake.subtract = np.add, np.subtract
    monkeypatch.setitem(sys.modules, "cupy", fake)


@pytest.mark.parametrize("conj_a,conj_b", [(False, False), (True, False), (False, True)])
def test_gauss_three_products_equal_the_complex_product(numpy_as_cupy, conj_a, conj_b):
    rng = np.random.default_rng(2)
    x, w = _rand(rng, (2, 3, 6, 5)), _rand(rng, (4, 3, 2, 3))
    calls = []

    def op(p, q, part):
        calls.append(part)
        assert not np.iscomplexobj(p) and not np.iscomplexobj(q)
        return reference.conv(p, q, padding=(1, 0))

    out = np.empty((2, 4, 7, 3), np.complex128)
    got = gauss_product(op, x, w, out, conj_a=conj_a, conj_b=conj_b)
    assert got is out and sorted(calls) == [1, 2, 3]
    want = reference.conv(np.conj(x) if conj_a else x, np.conj(w) if conj_b else w,
                          padding=(1, 0))
    np.testing.assert_allclose(out, want, rtol=1e-12, atol=1e-12)


def test_gauss_bias_parts_add_the_complex_bias(numpy_as_cupy):
    rng = np.random.default_rng(3)
    x, w, b = _rand(rng, (1, 2, 5)), _rand(rng, (3, 2, 2)), _rand(rng, (3,))
    biases = bias_parts(b)
    out = np.empty((1, 3, 4), np.complex128)
    gauss_product(lambda p, q, part: reference.conv(p, q, biases[part]), x, w, out)
    np.testing.assert_allclose(out, reference.conv(x, w, b), rtol=1e-12, atol=1e-12)
    assert bias_parts(None) == {1: None, 2: None, 3: None}


def test_complex_dtype_rules():
    c64, c128, f32 = (np.zeros(1, t) for t in (np.complex64, np.complex128, np.float32))
    assert require_complex_dtype({"x": c64, "w": c64, "bias": None}) == "complex64"
    with pytest.raises(TypeError, match="w has dtype float32 but the call is complex"):
        require_complex_dtype({"x": c64, "w": f32})
    with pytest.raises(TypeError, match="w has dtype complex128 but the input has dtype complex64"):
        require_complex_dtype({"x": c64, "w": c128})


# ------------------------------------------------------------------------------ unbatched
class _Shaped:
    def __init__(self, shape):
        self.shape, self.ndim = shape, len(shape)


def test_unbatched_rule():
    w = _Shaped((8, 3, 3, 3))
    assert arrays.is_unbatched(_Shaped((3, 16, 16)), w)       # (C, H, W) with a 2-d kernel
    assert not arrays.is_unbatched(_Shaped((1, 3, 16, 16)), w)
    assert not arrays.is_unbatched(_Shaped((16,)), w)          # two dims short: an error later
    assert arrays.batched_shape((3, 16, 16)) == (1, 3, 16, 16)
    assert arrays.batched_shape([3, 16]) == (1, 3, 16)
    assert arrays.batched_shape(None) is None                  # reported by the geometry


# ------------------------------------------------------------------------------ interop
class _FakeCAI:
    """A GPU array of another library, as far as the protocol goes."""

    def __init__(self):
        self.__cuda_array_interface__ = {"shape": (2, 3), "typestr": "<f4", "data": (0, False),
                                         "version": 3, "strides": None}


class _RaisingCAI:
    """PyTorch's tensors that require grad raise when the interface is read."""

    @property
    def __cuda_array_interface__(self):
        raise RuntimeError("Can't get __cuda_array_interface__ on Variable that requires grad")


class _CpuTensor:
    """A CPU tensor of a library whose class has the interface property (PyTorch's does)."""

    @property
    def __cuda_array_interface__(self):
        raise AttributeError("Can't get __cuda_array_interface__ on non-CUDA tensor")

    def __array__(self, dtype=None, copy=None):  # pragma: no cover - never converted
        raise AssertionError("a CPU tensor must not be copied to the GPU")

    def __dlpack_device__(self):
        return (1, 0)

    def __dlpack__(self, stream=None):  # pragma: no cover
        raise AssertionError


class _FakeDLPack:
    def __init__(self, device_type):
        self.device_type = device_type

    def __dlpack__(self, stream=None):  # pragma: no cover - the test replaces from_dlpack
        raise AssertionError

    def __dlpack_device__(self):
        return (self.device_type, 0)


@pytest.fixture
def cupy_spy(monkeypatch):
    cupy = pytest.importorskip("cupy")
    seen = []
    monkeypatch.setattr(cupy, "asarray", lambda a: seen.append(("asarray", a)) or "view")
    monkeypatch.setattr(cupy, "from_dlpack", lambda a: seen.append(("from_dlpack", a)) or "view")
    return seen


def test_cuda_array_interface_is_viewed_at_its_pointer(cupy_spy, monkeypatch):
    """Viewed from its description (the one the call cache keys it by), as cupy.asarray would
    view it (test_foreign.py checks the rest)."""
    cupy = sys.modules["cupy"]
    real = cupy.cuda.UnownedMemory
    monkeypatch.setattr(cupy.cuda, "UnownedMemory",  # (the pointer's device, without a driver)
                        lambda ptr, size, owner, device_id=-1: real(ptr, size, owner, 0))
    obj = _FakeCAI()
    obj.__cuda_array_interface__["data"] = (4096, False)
    view = arrays.require_array(obj, "x")
    assert type(view) is cupy.ndarray and view.data.ptr == 4096 and view.shape == (2, 3)
    assert view.dtype == np.float32 and view.strides == (12, 4)
    assert cupy_spy == []


def test_gpu_dlpack_goes_through_from_dlpack(cupy_spy):
    for device_type in (2, 10, 13):  # CUDA, ROCm, CUDA managed
        obj = _FakeDLPack(device_type)
        assert arrays.require_array(obj, "w") == "view"
        assert cupy_spy[-1] == ("from_dlpack", obj)


def test_cpu_arrays_are_refused_with_the_hint(cupy_spy):
    with pytest.raises(TypeError, match=r"x must be a cupy.ndarray.*cupy.asarray\(x\)"):
        arrays.require_array(np.ones(3, np.float32), "x")  # NumPy has a CPU __dlpack__
    with pytest.raises(TypeError, match="w must be a cupy.ndarray or a GPU array"):
        arrays.require_array(_FakeDLPack(1), "w")           # kDLCPU
    with pytest.raises(TypeError, match="out must be a cupy.ndarray"):
        arrays.require_array(object(), "out")
    with pytest.raises(TypeError, match=r"z must be a cupy.ndarray.*cupy.asarray\(z\)"):
        arrays.require_array(_CpuTensor(), "z")             # refused, not copied to the GPU
    assert cupy_spy == []


def test_a_failing_protocol_names_the_argument(monkeypatch):
    cupy = pytest.importorskip("cupy")

    def fail(a):
        a.__cuda_array_interface__  # reading it raises, as PyTorch does for requires_grad

    monkeypatch.setattr(cupy, "asarray", fail)
    with pytest.raises(TypeError, match=r"bias \(.*_RaisingCAI\) offers a GPU array protocol "
                                        r"but could not be viewed.*requires grad"):
        arrays.require_array(_RaisingCAI(), "bias")
