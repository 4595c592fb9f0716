"""CPU checks of cupyconv.ndimage's prepared calls (``_prepared``): the option keys by value, and,
end to end with the kernels compiled as host C++ (host_ndimage.py), that a warm call reuses the
runner of an equal validated call, gives the full path's result bit for bit, never answers for a
call with other options, strides or weights, and that nothing is remembered for calls that fail
validation, write into ``output`` arrays or warn.

NumPy arrays stand in for CuPy arrays: ``call_key`` is replaced by the same key for NumPy arrays
(shape, strides, dtype, alignment) and the current device by 0."""

import gc
import warnings
import weakref

import numpy as np
import pytest
import scipy.ndimage as sn
from nd_cases import CALLCACHE_CALLS as CALLS
from nd_cases import CALLCACHE_W1 as W1
from nd_cases import CALLCACHE_W2 as W2
from nd_cases import rand

import cupyconv
import cupyconv.ndimage as cn
from cupyconv._dispatch import callcache
from cupyconv._ndimage import callkey

from host_ndimage import HostRunner, compiler


# --------------------------------------------------------------------------- option keys
UNKEYABLE = object()


def frozen(v):
    try:
        return callkey._frozen(v)
    except callkey._Uncacheable:
        return UNKEYABLE


@pytest.mark.parametrize("a,b", [
    (1, 1.0), (1, True), (0, False), (1.0, np.float64(1.0)), (1, np.int64(1)),
    (np.float32(1.0), np.float64(1.0)), (0.0, -0.0), (1.0, 1.0 + 0j), ([1, 2], (1, 2)),
    ([1.0, 2.0], [1, 2]), ([[1.0]], [1.0]), ("reflect", "mirror"), (None, 0), (None, "None"),
    (np.array([1.0, 2.0]), np.array([1.0, 2.5])),
    (np.array([1.0, 2.0]), np.array([1.0, 2.0], np.float32)),
    (np.array([1.0, 2.0]), np.array([[1.0, 2.0]])),
    (np.array([1.0, 2.0]), np.array([1.0, 2.0]).astype(">f8")),
    (np.array([1.0, 2.0]), [1.0, 2.0]), (np.float32, np.float64), (np.float32, "float32"),
    (np.dtype(np.float32), np.float32), (float, np.float64),
    ({"truncate": 2.0}, {"truncate": 2}), ({"truncate": 2.0}, {"radius": 2.0}),
])
def test_different_options_have_different_keys(a, b):
    ka, kb = frozen(a), frozen(b)
    assert ka is not UNKEYABLE and kb is not UNKEYABLE
    assert ka != kb


@pytest.mark.parametrize("make", [
    lambda: 1.5, lambda: -0.0, lambda: float("nan"), lambda: [1.0, (2, "wrap")],
    lambda: np.arange(6.0).reshape(2, 3), lambda: np.arange(6.0).reshape(3, 2).T,
    lambda: np.float32(0.25), lambda: np.dtype("uint8"), lambda: 2 + 1j,
    lambda: {"radius": 3, "truncate": 2.0}, lambda: np.complex64,
])
def test_equal_options_have_equal_keys(make):
    a, b = make(), make()
    assert frozen(a) is not UNKEYABLE
    assert frozen(a) == frozen(b) and hash(frozen(a)) == hash(frozen(b))


def test_keys_hold_values_not_identities():
    w = np.array([1.0, 2.0, 3.0])
    before = frozen(w)
    w[1] = 5.0  # the caller changes the weights in place between calls
    assert frozen(w) != before
    items = [1.0, 2.0]
    before = frozen(items)
    items.append(3.0)
    assert frozen(items) != before
    assert frozen({"b": 1, "a": 2}) == frozen({"a": 2, "b": 1})


class _Subclass(np.ndarray):
    """An ndarray subclass (may read its values its own way)."""


class _DeviceArray:
    """A GPU array of another library (only its interface matters here)."""

    __cuda_array_interface__ = {"shape": (3,), "typestr": "<f8", "data": (0, False), "version": 3}


@pytest.mark.parametrize("value", [
    _DeviceArray(), [1.0, _DeviceArray()], object(), np.array(["a"]), np.array([1.0], object),
    np.complex128(1.0), np.ma.masked_array([1.0]), np.ones(2).view(_Subclass), range(3),
    (i for i in range(3)), np.str_("reflect"), {"radius": object()},
])
def test_unkeyable_options(value):
    assert frozen(value) is UNKEYABLE


def test_call_key_of_a_numpy_input_is_none():
    """Only CuPy ndarrays are keyed (callcache.call_key): anything else takes the full path."""
    assert cn._call_key("gaussian_filter", np.ones((4, 4)), (None, 1.0)) is None


# --------------------------------------------------------------------------- end to end
pytestmark_host = pytest.mark.skipif(compiler() is None, reason="no host C++ compiler")


def _numpy_call_key(name, arrays, options):
    """callcache.call_key for NumPy stand-ins: the same fields, and the arrays as operands."""
    parts = [name]
    for a in arrays:
        if type(a) is not np.ndarray:
            return None, arrays
        parts.append((a.shape, a.strides, a.dtype, 0, a.ctypes.data & 15))
    parts.append(options)
    return tuple(parts), arrays


class Cached(HostRunner):
    """HostRunner with NumPy inputs keyed, counting full-path preparations (calls of
    ``_input`` on the public input)."""

    def __init__(self, monkeypatch):
        super().__init__(monkeypatch)
        monkeypatch.setattr(cn, "call_key", _numpy_call_key)
        monkeypatch.setattr(cn, "_device_id", lambda: 0)
        self.prepared = 0
        real_input = cn._input

        def counted(a, name="input"):
            self.prepared += 1
            return real_input(a, name)

        monkeypatch.setattr(cn, "_input", counted)
        callcache.clear()

    @staticmethod
    def entries() -> int:
        return len(callcache._calls)


@pytest.fixture
def cached(monkeypatch):
    runner = Cached(monkeypatch)
    yield runner
    callcache.clear()


def check(got, ref):
    assert got.shape == ref.shape and got.dtype == ref.dtype, (got.dtype, ref.dtype)
    assert got.flags.c_contiguous
    if ref.dtype.kind in "iu":
        np.testing.assert_array_equal(got, ref)
    else:
        tol = 2e-5 if ref.dtype in (np.float32, np.complex64) else 1e-12
        scale = max(1.0, np.abs(ref).max(initial=0.0))
        np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * scale)




@pytestmark_host
@pytest.mark.parametrize("name,args,kw,other", CALLS, ids=[c[0] for c in CALLS])
def test_warm_calls_reuse_the_runner(cached, name, args, kw, other):
    rng = np.random.default_rng(len(name))
    fn, ref = getattr(cn, name), getattr(sn, name)
    x = rand(rng, (6, 9), "float64")
    check(fn(x, *args, **kw), ref(x, *args, **kw))
    assert (cached.entries(), cached.prepared > 0) == (1, True)

    cached.prepared, launches = 0, len(cached.launches)
    x2 = rand(rng, (6, 9), "float64")  # fresh data, same shape and options: the runner
    warm = fn(x2, *args, **kw)
    assert cached.prepared == 0 and cached.entries() == 1
    assert len(cached.launches) > launches
    check(warm, ref(x2, *args, **kw))
    callcache.clear()  # the full path on the same data: bit for bit
    cold = fn(x2, *args, **kw)
    assert cold.dtype == warm.dtype and cold.shape == warm.shape
    np.testing.assert_array_equal(cold, warm)

    kw2 = {**kw, **other}  # another option value: another entry, its own result
    cached.prepared = 0
    check(fn(x2, *args, **kw2), ref(x2, *args, **kw2))
    assert cached.prepared > 0 and cached.entries() == 2


@pytestmark_host
def test_views_and_weights_are_not_confused(cached):
    rng = np.random.default_rng(11)
    base = rand(rng, (8, 12), "float32")
    x = np.ascontiguousarray(base[::-1, 2:11])
    check(cn.gaussian_filter(x, 0.7), sn.gaussian_filter(x, 0.7))
    view = base[::-1, 2:11]  # same shape, negative strides and an offset
    assert view.shape == x.shape and view.strides != x.strides
    cached.prepared = 0
    check(cn.gaussian_filter(view, 0.7), sn.gaussian_filter(view, 0.7))
    assert cached.prepared > 0 and cached.entries() == 2
    t = base.T[1:]  # transposed
    check(cn.uniform_filter(t, 3), sn.uniform_filter(t, 3))

    w = np.array([0.25, 0.5, 0.25])
    check(cn.correlate1d(x, w, 0), sn.correlate1d(x, w, 0))
    w[0] = -2.0  # the same weights array, changed in place: not the cached filter
    check(cn.correlate1d(x, w, 0), sn.correlate1d(x, w, 0))
    check(cn.correlate1d(x, list(w), 0), sn.correlate1d(x, list(w), 0))


@pytestmark_host
def test_complex_and_integer_inputs(cached):
    rng = np.random.default_rng(12)
    for dtype in ("complex64", "uint8", "int16"):
        for _ in range(2):
            x = rand(rng, (5, 7), dtype)
            check(cn.uniform_filter(x, 3, mode="constant", cval=2),
                  sn.uniform_filter(x, 3, mode="constant", cval=2))
            check(cn.sobel(x, 0), sn.sobel(x, 0))
    wc = np.array([1.0 + 0.5j, -0.25j, 0.5])
    x = rand(rng, (5, 7), "float32")
    for _ in range(2):
        check(cn.correlate1d(x, wc, 1), sn.correlate1d(x, wc, 1))
    xc = rand(rng, (5, 7), "complex64")
    for _ in range(2):
        check(cn.correlate1d(xc, wc, 0, mode="constant", cval=1 - 2j),
              sn.correlate1d(xc, wc, 0, mode="constant", cval=1 - 2j))


@pytestmark_host
def test_output_dtype_is_cached_output_array_is_not(cached):
    rng = np.random.default_rng(13)
    x = rand(rng, (6, 8), "uint8")
    for output in (np.float32, "float64", np.dtype(np.float64)):
        for _ in range(2):
            check(cn.gaussian_filter(x, 1.0, output=output),
                  sn.gaussian_filter(x, 1.0, output=output))
    assert cached.entries() == 3
    out = np.full((8, 6), 7.0).T  # non-contiguous
    for _ in range(2):
        assert cn.sobel(x, 1, output=out) is out
        check(np.ascontiguousarray(out), sn.sobel(x, 1, output=np.float64))
    same = x.astype(np.float64)  # overlapping the input
    ref = sn.uniform_filter(same, 5)
    assert cn.uniform_filter(same, 5, output=same) is same
    check(same, ref)
    assert cached.entries() == 3


@pytestmark_host
def test_failed_validation_is_not_cached(cached):
    x = np.ones((5, 6))
    bad = [
        ("correlate1d", (W1,), dict(origin=5), ValueError),
        ("correlate1d", ([],), {}, RuntimeError),
        ("convolve", (np.ones(3),), {}, RuntimeError),
        ("gaussian_filter", (1.0,), dict(mode="symmetric"), RuntimeError),
        ("gaussian_filter", (1.0,), dict(order=-1), ValueError),
        ("uniform_filter1d", (0,), {}, RuntimeError),
        ("uniform_filter", (3,), dict(cval=1j), TypeError),
        ("sobel", (), dict(axis=2), Exception),
        ("laplace", (), dict(mode=["reflect", "nope"]), RuntimeError),
        ("gaussian_laplace", (1.0,), dict(bogus=1), TypeError),
        ("gaussian_gradient_magnitude", (1.0,), dict(radius=-1), ValueError),
        ("gaussian_filter", (1.0,), dict(output="bool"), Exception),
    ]
    for name, args, kw, error in bad:
        for _ in range(2):  # raised again: nothing was remembered
            with pytest.raises(error):
                getattr(cn, name)(x, *args, **kw)
        assert cached.entries() == 0, name
    assert cached.launches == []


@pytestmark_host
def test_promotion_warning_every_call(cached):
    """output= a real dtype for a complex result: SciPy warns and promotes, on every call.
    (SciPy's filters that chain passes -- laplace, sobel, gaussian_filter, ... -- refuse it
    instead: test_complex_data_output_rules_match_scipy.)"""
    x = rand(np.random.default_rng(14), (4, 5), "complex64")
    calls = [lambda: cn.uniform_filter(x, 3, output=np.float32),
             lambda: cn.correlate1d(x, [1.0, 2.0], output=np.float64),
             lambda: cn.gaussian_filter1d(x, 1.0, output=np.float32)]
    for _ in range(2):
        for call in calls:
            with pytest.warns(UserWarning, match="promoting") as record:
                assert call().dtype.kind == "c"
            assert {w.filename for w in record} == {__file__}  # names the caller's line
    assert cached.entries() == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cn.uniform_filter(x, 3, output=np.complex64)
        cn.uniform_filter(x, 3, output=np.complex64)
    assert cached.entries() == 1


@pytestmark_host
def test_clear_caches_empties_the_prepared_calls(cached):
    x = np.ones((4, 4))
    cn.gaussian_filter(x, 1.0)
    assert cached.entries() == 1
    cupyconv.clear_caches()
    assert cached.entries() == 0


@pytestmark_host
def test_empty_and_unfiltered_inputs(cached):
    """No launch: an empty input, or no filtered axis (a copy)."""
    empty, x = np.ones((0, 5)), np.arange(6.0).reshape(2, 3)
    for _ in range(2):
        check(cn.gaussian_filter(empty, 1.0), sn.gaussian_filter(empty, 1.0))
        check(cn.correlate(empty, W2), sn.correlate(empty, W2))
        check(cn.gaussian_filter(x, 0.0), sn.gaussian_filter(x, 0.0))
        check(cn.uniform_filter(x, 1), sn.uniform_filter(x, 1))
        check(cn.laplace(x, axes=()), x)  # no axes: a copy
    assert cached.launches == [] and cached.entries() == 5


@pytestmark_host
def test_runners_hold_no_input(cached):
    """A remembered runner keeps its launchers, not the array of the call that made it."""
    rng = np.random.default_rng(15)
    for name, args, kw, _ in CALLS:
        x = rand(rng, (6, 9), "float64")
        getattr(cn, name)(x, *args, **kw)
        alive = weakref.ref(x)
        del x
        gc.collect()
        assert alive() is None, name
