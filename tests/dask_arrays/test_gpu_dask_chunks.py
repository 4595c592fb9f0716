"""NumPy chunks run on the GPU with ``gpu=True`` (``cupyconv/dask/chunks.py``): each chunk with its
halo copied to the GPU, run there and copied back, equal to the CuPy-chunked graph; and a volume
on disk eight times CuPy's pool limit filtered that way (out of core)."""

import numpy as np
import pytest

pytest.importorskip("dask.array")  # "dask" alone could resolve to this folder as a namespace
import dask.array as da  # noqa: E402
import scipy.ndimage as sn  # noqa: E402
from dask_gpu_cases import SCHEDULERS  # noqa: E402

import cupyconv.dask as cd  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_numpy_chunks_run_on_the_gpu_with_gpu_true(scheduler, monkeypatch):
    """gpu=True: NumPy chunks (with their halos) are copied to the GPU, run by cupyconv and come
    back as NumPy; equal to the CuPy-chunked graph.  SciPy must not be called."""
    import cupy
    import scipy.ndimage
    import scipy.signal

    def no_scipy(*args, **kwargs):
        raise AssertionError("a NumPy chunk ran on the CPU")

    rng = np.random.default_rng(31)
    a = rng.uniform(-1, 1, (19, 23, 17)).astype(np.float32)
    img = rng.uniform(-1, 1, (6, 4, 15, 13)).astype(np.float32)
    w = rng.uniform(-1, 1, (6, 2, 3, 3)).astype(np.float32)
    wdw, wpw = (rng.uniform(-1, 1, s).astype(np.float32) for s in ((4, 1, 3, 3), (5, 4, 1, 1)))
    k3 = rng.uniform(-1, 1, (3, 2, 4)).astype(np.float32)
    calls = {
        "gaussian": lambda x, **g: cd.gaussian_filter(x, 1.3, mode="wrap", **g),
        "correlate1d": lambda x, **g: cd.correlate1d(x, k3[0, 0], axis=1, **g),
        "signal": lambda x, **g: cd.signal_convolve(x, k3, "same", **g),
    }
    convs = {
        "conv": lambda x, **g: cd.conv(x, w, padding=1, groups=2, **g),
        "separable": lambda x, **g: cd.separable_conv(x, wdw, wpw, padding=1, **g),
        "conv_transpose": lambda x, **g: cd.conv_transpose(x, w[:4], stride=2, **g),
    }
    cases = [(name, fn, a, (7, 8, 17)) for name, fn in calls.items()]
    cases += [(name, fn, img, (2, 4, 15, 13)) for name, fn in convs.items()]
    cases.append(("conv-spatial", convs["conv"], img, (6, 4, 6, 5)))
    expected = {name: fn(da.from_array(cupy.asarray(v), chunks=c)).compute(scheduler=scheduler)
                for name, fn, v, c in cases}
    for mod in (scipy.ndimage, scipy.signal):
        for fname in ("gaussian_filter", "correlate1d", "convolve", "correlate"):
            if hasattr(mod, fname):
                monkeypatch.setattr(mod, fname, no_scipy)
    for name, fn, v, c in cases:
        lazy = fn(da.from_array(v, chunks=c), gpu=True)
        assert isinstance(lazy._meta, np.ndarray), name
        got = lazy.compute(scheduler=scheduler)
        assert isinstance(got, np.ndarray), name
        ref = cupy.asnumpy(expected[name])
        np.testing.assert_allclose(got, ref, rtol=2e-5, atol=2e-5 * float(np.abs(ref).max()),
                                   err_msg=name)


# --------------------------------------------------------------------------- out of core
def test_out_of_core_volume_through_a_limited_pool(tmp_path):
    """A 1 GiB float32 volume on disk (a NumPy memmap), eight times the memory CuPy's pool may
    hold in this test, is filtered with ``gpu=True``: each chunk with its halo (cut on the
    host) is copied to the GPU, filtered, copied back and written to an output memmap that
    starts as NaN.  Every element is written; sampled blocks equal SciPy on the same region."""
    import cupy

    shape, chunks, sigma = (1024, 512, 512), (32, 256, 256), 2.0
    radius = int(4.0 * sigma + 0.5)
    src = np.lib.format.open_memmap(tmp_path / "in.npy", "w+", np.float32, shape)
    rng = np.random.default_rng(7)
    for z in range(0, shape[0], 64):
        src[z:z + 64] = rng.uniform(-1, 1, (64,) + shape[1:]).astype(np.float32)
    dst = np.lib.format.open_memmap(tmp_path / "out.npy", "w+", np.float32, shape)
    dst[...] = np.nan
    pool = cupy.get_default_memory_pool()
    cupy.cuda.Device().synchronize()
    pool.free_all_blocks()
    pool.set_limit(size=src.nbytes // 8)  # an allocation past it raises OutOfMemoryError
    try:
        y = cd.gaussian_filter(da.from_array(src, chunks=chunks), sigma, gpu=True)
        da.store(y, dst, scheduler="threads", num_workers=2, lock=False)
    finally:
        pool.set_limit(size=0)
    dst.flush()
    assert not np.isnan(dst).any(), "an output element was not written"
    # sampled blocks: the corners, chunk boundaries, an inner block at the far edge
    samples = [(0, 0, 0), (24, 240, 230), (500, 100, 480), (shape[0] - 20, shape[1] - 40, 472)]
    for z, y0, x0 in samples:
        lo = [max(0, v - radius) for v in (z, y0, x0)]
        hi = [min(n, v + 40 + radius) for v, n in zip((z, y0, x0), shape)]
        region = np.asarray(src[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]], np.float64)
        ref = sn.gaussian_filter(region, sigma, mode="reflect")
        sl = tuple(slice(v - a, v - a + 40) for v, a in zip((z, y0, x0), lo))
        got = dst[z:z + 40, y0:y0 + 40, x0:x0 + 40]
        np.testing.assert_allclose(got, ref[sl][:got.shape[0], :got.shape[1], :got.shape[2]],
                                   rtol=1e-5, atol=1e-5)
