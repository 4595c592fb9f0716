"""Prepared calls of cupyconv.ndimage on the GPU: every public filter called twice with the same
shapes and options on fresh data (the second call reuses the first one's runner) and once with
another option value, each against scipy.ndimage; warm results bit for bit equal to the full
path's; views of the same shape (reversed, offset, 16-byte aligned or not), output dtypes and
arrays, complex data, other threads and streams, and a cleared module cache."""

import gc
import threading

import numpy as np
import pytest
import scipy.ndimage as sn
from nd_cases import CALLCACHE_CALLS as CALLS
from nd_cases import CALLCACHE_W1 as W1
from nd_cases import CALLCACHE_W2 as W2
from nd_cases import rand
from test_gpu_ndimage import check

import cupyconv
import cupyconv.ndimage as cn
from cupyconv._dispatch import callcache

pytestmark = pytest.mark.gpu



def _prepared_counter(monkeypatch) -> list:
    """Counts full-path preparations (validations of the public input)."""
    calls = []
    real_input = cn._input

    def counted(a, name="input"):
        calls.append(name)
        return real_input(a, name)

    monkeypatch.setattr(cn, "_input", counted)
    return calls


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,args,kw,other", CALLS, ids=[f"{c[0]}-{i}" for i, c in
                                                          enumerate(CALLS)])
def test_warm_calls(monkeypatch, name, args, kw, other, dtype):
    import cupy

    rng = np.random.default_rng([len(name), len(kw), len(dtype)])
    fn, ref = getattr(cn, name), getattr(sn, name)
    prepared = _prepared_counter(monkeypatch)
    shape = (21, 44)  # past one row-walk / sep2d tile in neither direction: quick
    x = rand(rng, shape, dtype)
    check(fn(cupy.asarray(x), *args, **kw), ref(x, *args, **kw))
    assert prepared and len(callcache._calls) == 1

    prepared.clear()
    x2 = rand(rng, shape, dtype)
    x2d = cupy.asarray(x2)
    warm = fn(x2d, *args, **kw)
    assert not prepared and len(callcache._calls) == 1  # the first call's runner
    assert warm.flags.c_contiguous
    check(warm, ref(x2, *args, **kw))
    callcache.clear()
    cold = fn(x2d, *args, **kw)  # the full path on the same data: the same bits
    assert cold.dtype == warm.dtype and cold.shape == warm.shape
    np.testing.assert_array_equal(cold.get(), warm.get())

    kw2 = {**kw, **other}
    prepared.clear()
    check(fn(x2d, *args, **kw2), ref(x2, *args, **kw2))
    assert prepared and len(callcache._calls) == 2


@pytest.mark.parametrize("name,args,kw", [
    ("gaussian_filter", (0.9,), {}),              # fused pair on the row walk / nd_sep2d
    ("uniform_filter", (3,), dict(mode="constant", cval=1.0)),
    ("correlate", (W2,), dict(mode="wrap")),     # dense row walk
    ("correlate1d", (W1,), dict(axis=0)),         # column kernel
    ("sobel", (), dict(axis=-1)),
])
def test_views_of_one_shape(name, args, kw):
    """A contiguous array, then views of its shape: reversed and offset (other strides: another
    key), 4 bytes past a 16-byte boundary (other alignment: another key), and 16 bytes past one
    (the contiguous array's key: its runner, whose row walk checks each array's alignment)."""
    import cupy

    rng = np.random.default_rng(len(name))
    fn, ref = getattr(cn, name), getattr(sn, name)
    H, W = 24, 64
    x = rand(rng, (H, W), "float32")
    check(fn(cupy.asarray(x), *args, **kw), ref(x, *args, **kw))
    big = cupy.asarray(rand(rng, (H + 3, W + 9), "float32"))
    flat = cupy.asarray(rand(rng, (H * W + 8,), "float32"))
    views = [big[::-1, 5:5 + W][1:H + 1], big[2:2 + H, ::-1][:, 3:3 + W],
             flat[1:1 + H * W].reshape(H, W), flat[4:4 + H * W].reshape(H, W)]
    entries = [1]
    for v in views:
        assert v.shape == (H, W)
        check(fn(v, *args, **kw), ref(cupy.asnumpy(v), *args, **kw))
        entries.append(len(callcache._calls))
    assert entries == [1, 2, 3, 4, 4]


def test_output_dtype_and_array():
    import cupy

    rng = np.random.default_rng(40)
    x = rand(rng, (20, 30), "uint8")
    xd = cupy.asarray(x)
    for output in (np.float32, "float64", np.dtype(np.float64)):
        for _ in range(2):
            check(cn.gaussian_filter(xd, 1.5, output=output),
                  sn.gaussian_filter(x, 1.5, output=output))
    assert len(callcache._calls) == 3
    for _ in range(2):
        out = cupy.full((30, 20), 7, np.float64).T  # non-contiguous
        assert cn.sobel(xd, 1, output=out) is out
        check(out, sn.sobel(x, 1, output=np.float64))
        same = cupy.asarray(x.astype(np.float64))  # overlapping the input
        ref = sn.uniform_filter(x.astype(np.float64), 5)
        assert cn.uniform_filter(same, 5, output=same) is same
        check(same, ref)
    assert len(callcache._calls) == 3  # output arrays take the full path


def test_complex_data_and_weights():
    import cupy

    rng = np.random.default_rng(41)
    wc = rng.uniform(-1, 1, (3, 3)) + 1j * rng.uniform(-1, 1, (3, 3))
    for _ in range(2):
        xc = rand(rng, (9, 14), "complex64")
        xcd = cupy.asarray(xc)
        for fn in ("correlate", "convolve"):
            check(getattr(cn, fn)(xcd, wc, mode="constant", cval=1 + 2j),
                  getattr(sn, fn)(xc, wc, mode="constant", cval=1 + 2j))
        check(cn.uniform_filter(xcd, 3), sn.uniform_filter(xc, 3))
        check(cn.gaussian_filter1d(xcd, 1.0, axis=0), sn.gaussian_filter1d(xc, 1.0, axis=0))
        xr = rand(rng, (9, 14), "float32")
        check(cn.correlate1d(cupy.asarray(xr), wc[0], 1), sn.correlate1d(xr, wc[0], 1))
    assert len(callcache._calls) == 5
    with pytest.warns(UserWarning, match="promoting"):  # warns on every call: never remembered
        cn.uniform_filter(xcd, 3, output=np.float32)
    with pytest.warns(UserWarning, match="promoting"):
        cn.uniform_filter(xcd, 3, output=np.float32)
    assert len(callcache._calls) == 5


def test_weights_changed_in_place():
    import cupy

    rng = np.random.default_rng(42)
    x = rand(rng, (16, 40), "float64")
    xd = cupy.asarray(x)
    w = rng.uniform(-1, 1, (3, 3))
    check(cn.correlate(xd, w), sn.correlate(x, w))
    w[1, 1] += 2.0
    check(cn.correlate(xd, w), sn.correlate(x, w))
    wd = cupy.asarray(w)  # CuPy weights: the full path (keyed by nothing)
    check(cn.correlate(xd, wd), sn.correlate(x, w))
    assert len(callcache._calls) == 2


def test_threads_and_streams_share_a_runner():
    """Prepared on the null stream, then reused from other threads, each on its own stream."""
    import cupy

    rng = np.random.default_rng(43)
    xs = [rand(rng, (3, 32, 48), "float32") for _ in range(5)]
    kw = dict(sigma=(0.0, 1.2, 0.7), mode="mirror")
    check(cn.gaussian_filter(cupy.asarray(xs[0]), **kw), sn.gaussian_filter(xs[0], **kw))
    results, errors = {}, []

    def worker(i):
        try:
            s = cupy.cuda.Stream(non_blocking=True)
            with s:
                for _ in range(3):
                    results[i] = cn.gaussian_filter(cupy.asarray(xs[i]), **kw).get()
            s.synchronize()
        except Exception as e:  # reported below, not lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for i in range(1, 5):
        ref = sn.gaussian_filter(xs[i], **kw)
        np.testing.assert_allclose(results[i], ref, rtol=2e-5, atol=2e-5 * np.abs(ref).max())
    assert len(callcache._calls) == 1


def test_runners_survive_a_cleared_module_cache():
    import cupy

    rng = np.random.default_rng(44)
    x = rand(rng, (12, 30), "float32")
    check(cn.gaussian_filter(cupy.asarray(x), 1.0), sn.gaussian_filter(x, 1.0))
    cupyconv.jit.clear_cache()
    gc.collect()
    x2 = rand(rng, (12, 30), "float32")
    check(cn.gaussian_filter(cupy.asarray(x2), 1.0), sn.gaussian_filter(x2, 1.0))
    assert len(callcache._calls) == 1
    cupyconv.clear_caches()
    assert not callcache._calls
