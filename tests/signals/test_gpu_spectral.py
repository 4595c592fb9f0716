"""The signal API's own-plan FFT correlation (cupyconv._signal.spectral) against SciPy: every
work dtype, 1-3 trailing axes with broadcast batches either way, reversed views, the first call
of a shape on a second stream, and several threads at once (plans are per thread)."""

import threading

import numpy as np
import pytest
from scipy import signal

from cupyconv._signal import spectral
from cupyconv._signal.fft import next_fast_len

pytestmark = pytest.mark.gpu

WORK = ["float32", "float64", "complex64", "complex128"]
# (x shape, g shape, convolved trailing axes): batches broadcast from g, from x, or equal
CASES = [((41,), (6,), 1), ((13, 17), (4, 5), 2), ((7, 9, 11), (3, 4, 2), 3),
         ((5, 12, 10), (1, 3, 3), 2), ((1, 30), (3, 7), 1), ((2, 3, 19), (2, 3, 4), 1),
         ((8, 9), (8, 9), 2), ((1, 26), (1, 5), 2), ((26, 1), (3, 1), 2),
         ((4, 1, 1, 9), (1, 1, 1, 2), 3)]  # (axes of length 1 in both: no transform there)


def full_correlation(x, g, axes, dtype):
    """spectral.full_correlation with the FFT path's transform lengths."""
    fast = tuple(next_fast_len(x.shape[a] + g.shape[a] - 1) for a in axes)
    return spectral.full_correlation(x, g, axes, fast, dtype)


def rand(rng, shape, dtype):
    a = rng.uniform(-1, 1, shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.uniform(-1, 1, shape)
    return a.astype(dtype)


def reference(x, g, k):
    """'full' correlation over the last k axes, batches broadcast (float64/complex128)."""
    lead = np.broadcast_shapes(x.shape[:x.ndim - k], g.shape[:g.ndim - k])
    xb = np.broadcast_to(x, lead + x.shape[x.ndim - k:]).reshape((-1,) + x.shape[x.ndim - k:])
    gb = np.broadcast_to(g, lead + g.shape[g.ndim - k:]).reshape((-1,) + g.shape[g.ndim - k:])
    # (SciPy conjugates its second operand; full_correlation does not: that is the plan's)
    out = [signal.correlate(a.astype(np.complex128), np.conj(b.astype(np.complex128)), mode="full",
                            method="direct") for a, b in zip(xb, gb)]
    out = np.stack(out).reshape(lead + out[0].shape)
    return out if np.dtype(x.dtype).kind == "c" else out.real


def check(got, ref, dtype):
    got = got.get()
    assert got.shape == ref.shape and got.dtype == np.dtype(dtype)
    tol = 1e-5 if dtype in ("float32", "complex64") else 1e-12
    assert np.abs(got - ref).max() <= tol * max(np.abs(ref).max(), 1.0) * np.sqrt(ref.size)


@pytest.mark.parametrize("dtype", WORK)
def test_full_correlation_matches_scipy(dtype):
    import cupy

    rng = np.random.default_rng(WORK.index(dtype))
    for xs, gs, k in CASES:
        x, g = rand(rng, xs, dtype), rand(rng, gs, dtype)
        axes = tuple(range(len(xs) - k, len(xs)))
        cupy.full(4096, np.nan, np.float64)  # NaNs left in the pool must not leak
        check(full_correlation(cupy.asarray(x), cupy.asarray(g), axes, dtype),
              reference(x, g, k), dtype)
        # reversed views of both operands
        xv = cupy.asarray(np.ascontiguousarray(x[..., ::-1]))[..., ::-1]
        gv = cupy.asarray(np.ascontiguousarray(g[..., ::-1]))[..., ::-1]
        check(full_correlation(xv, gv, axes, dtype), reference(x, g, k), dtype)


@pytest.mark.parametrize("dtype", ["float32", "complex128"])
def test_leading_and_inner_axes(dtype):
    """Convolved axes that are not the trailing ones (moved last and back): equal to SciPy."""
    import cupy

    rng = np.random.default_rng(3)
    x = rand(rng, (9, 5, 11, 4), dtype)
    for axes in [(0,), (0, 2), (1, 2), (0, 1, 2)]:
        # the kernel broadcasts along the other axes
        g = rand(rng, tuple((3, 4, 5, 2)[i] if i in axes else 1 for i in range(4)), dtype)
        rest = [i for i in range(4) if i not in axes]
        order = rest + list(axes)
        ref = reference(x.transpose(order), g.transpose(order), len(axes))
        ref = ref.transpose(np.argsort(order))
        check(full_correlation(cupy.asarray(x), cupy.asarray(g), axes, dtype), ref,
              dtype)


def test_declines_what_it_does_not_cover():
    import cupy

    x, g = cupy.ones((6, 7, 3), np.float32), cupy.ones((2, 2, 3), np.float32)
    assert full_correlation(cupy.ones((2, 0), np.float32), g[0], (1,), "float32") is None
    assert full_correlation(cupy.ones((2, 2, 2, 2), np.float32),
                                     cupy.ones((1, 2, 2, 2), np.float32), (0, 1, 2, 3),
                                     "float32") is None  # four axes: cupy.fft's path


def test_second_stream_and_threads():
    """A shape's first call (its plans created) on a non-blocking stream, then calls from four
    threads at once, each on its own stream and shape, repeated: every result right."""
    import cupy

    rng = np.random.default_rng(7)
    x, g = rand(rng, (23, 29), "float32"), rand(rng, (5, 3), "float32")
    with cupy.cuda.Stream(non_blocking=True) as stream:
        got = full_correlation(cupy.asarray(x), cupy.asarray(g), (0, 1), "float32")
        stream.synchronize()
    check(got, reference(x, g, 2), "float32")

    problems = [(rand(rng, (20 + i, 31), "float32"), rand(rng, (3, 4 + i), "float32"))
                for i in range(4)]
    refs = [reference(a, b, 2) for a, b in problems]
    errors = []

    def work(i):
        try:
            a, b = problems[i]
            with cupy.cuda.Stream(non_blocking=True) as s:
                da, db = cupy.asarray(a), cupy.asarray(b)
                for _ in range(5):
                    z = full_correlation(da, db, (0, 1), "float32")
                s.synchronize()
            check(z, refs[i], "float32")
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
