"""cupyconv.dask on dask arrays of CuPy chunks (one GPU, synchronous and threaded schedulers)
against cupyconv.ndimage / cupyconv.conv on the whole array, and SciPy for one case.  Small shapes,
uneven chunks, some thinner than the halo."""

import contextlib
import os

import numpy as np
import pytest

pytest.importorskip("dask.array")  # "dask" alone could resolve to this folder as a namespace
import dask.array as da  # noqa: E402
import scipy.ndimage as sn  # noqa: E402

import cupyconv  # noqa: E402
import cupyconv.dask as cd  # noqa: E402
import cupyconv.ndimage as cn  # noqa: E402
from cupyconv import reference  # noqa: E402

pytestmark = pytest.mark.gpu

SCHEDULERS = ["synchronous", "threads"]
MODES = ["reflect", "constant", "nearest", "mirror", "wrap"]
SHAPES = {1: (41,), 2: (19, 23), 3: (9, 10, 12)}
CHUNKS = {1: ((6, 2, 20, 13),), 2: ((5, 1, 13), (8, 8, 7)), 3: ((2, 7), (4, 6), (5, 1, 6))}


def device_input(ndim, dtype, seed):
    import cupy

    a = np.random.default_rng(seed).uniform(-1, 1, SHAPES[ndim]).astype(dtype)
    return a, cupy.asarray(a)


def check(lazy, whole, scheduler):
    """``lazy`` computes to a CuPy array equal to ``whole`` (the one-call result) within float
    rounding: the chunk and whole-array calls may choose different kernels (fused or not, tiled or
    direct), which sum in different orders."""
    import cupy

    got = lazy.compute(scheduler=scheduler)
    assert isinstance(got, cupy.ndarray)
    assert got.shape == whole.shape and got.dtype == whole.dtype
    tol = 2e-5 if whole.dtype in (np.float32, np.complex64) else 1e-12
    ref = cupy.asnumpy(whole)
    np.testing.assert_allclose(cupy.asnumpy(got), ref, rtol=tol,
                               atol=tol * max(1.0, float(np.abs(ref).max())))


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_filters_equal_the_whole_array_call(ndim, mode, scheduler):
    a, xd = device_input(ndim, np.float64, [ndim, MODES.index(mode)])
    x = da.from_array(xd, chunks=CHUNKS[ndim])
    rng = np.random.default_rng(ndim)
    w1 = rng.uniform(-1, 1, 4)
    wn = rng.uniform(-1, 1, (3, 4, 2)[:ndim])
    kw = dict(mode=mode, cval=0.5)
    calls = [
        ("correlate1d", (w1,), dict(axis=0, origin=1)),
        ("convolve1d", (w1,), dict(axis=-1, origin=-2)),
        ("correlate", (wn,), dict(origin=0)),
        ("convolve", (wn,), dict(origin=[-(k // 2) for k in wn.shape])),
        ("gaussian_filter", (1.5,), {}),
        ("gaussian_filter1d", (1.0,), dict(axis=0, order=1)),
        ("uniform_filter", (4,), dict(origin=1)),
        ("uniform_filter1d", (5,), dict(axis=-1)),
        ("sobel", (), dict(axis=0)),
        ("prewitt", (), dict(axis=-1)),
        ("laplace", (), {}),
        ("gaussian_laplace", (1.0,), {}),
        ("gaussian_gradient_magnitude", (0.8,), {}),
    ]
    for name, args, extra in calls:
        check(getattr(cd, name)(x, *args, **kw, **extra),
              getattr(cn, name)(xd, *args, **kw, **extra), scheduler)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_float32_gaussian_against_scipy(scheduler):
    import cupy

    a, xd = device_input(3, np.float32, 5)
    got = cd.gaussian_filter(da.from_array(xd, chunks=CHUNKS[3]), (1.0, 2.0, 0.7),
                             mode="mirror").compute(scheduler=scheduler)
    np.testing.assert_allclose(cupy.asnumpy(got),
                               sn.gaussian_filter(a, (1.0, 2.0, 0.7), mode="mirror"),
                               rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv_over_batch_chunks(layout, scheduler):
    import cupy

    rng = np.random.default_rng(len(layout))
    shape = (7, 4, 12, 10) if layout == "NCHW" else (7, 12, 10, 4)
    wshape = (6, 2, 3, 3) if layout == "NCHW" else (6, 3, 3, 2)
    a = rng.uniform(-1, 1, shape).astype(np.float32)
    w = rng.uniform(-1, 1, wshape).astype(np.float32)
    b = rng.uniform(-1, 1, 6).astype(np.float32)
    xd, wd, bd = cupy.asarray(a), cupy.asarray(w), cupy.asarray(b)
    kw = dict(stride=(2, 1), padding=1, groups=2, layout=layout)
    x = da.from_array(xd, chunks=((3, 1, 3),) + tuple((s,) for s in shape[1:]))
    check(cd.conv(x, wd, bd, **kw), cupyconv.conv(xd, wd, bd, **kw), scheduler)
    # NumPy weights are accepted too (copied to the device per chunk)
    y = cd.conv(x, w, b, **kw).compute(scheduler=scheduler)
    np.testing.assert_allclose(cupy.asnumpy(y), reference.conv(a, w, b, **kw), rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_signal_filters_equal_the_whole_array_call(ndim, mode, scheduler):
    import cupy
    import scipy.signal as ss

    import cupyconv.signal as cs

    a, xd = device_input(ndim, np.float32, [ndim, len(mode), 9])
    x = da.from_array(xd, chunks=CHUNKS[ndim])  # some chunks thinner than the halo
    rng = np.random.default_rng(ndim)
    for kernel in [(4, 3, 2)[:ndim], (3, 2, 5)[:ndim]]:  # even and odd along every axis
        w = rng.uniform(-1, 1, kernel).astype(np.float32)
        wd = cupy.asarray(w)
        check(cd.signal_correlate(x, w, mode), cs.correlate(xd, wd, mode), scheduler)
        check(cd.signal_convolve(x, wd, mode), cs.convolve(xd, wd, mode), scheduler)
    got = cd.signal_correlate(x, w, mode).compute(scheduler=scheduler)
    np.testing.assert_allclose(cupy.asnumpy(got), ss.correlate(a, w, mode), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv_over_spatial_chunks(layout, scheduler):
    import cupy

    rng = np.random.default_rng([len(layout), 3])
    shape = (2, 4, 21, 19) if layout == "NCHW" else (2, 21, 19, 4)
    wshape = (6, 2, 3, 4) if layout == "NCHW" else (6, 3, 4, 2)
    a = rng.uniform(-1, 1, shape).astype(np.float32)
    w = rng.uniform(-1, 1, wshape).astype(np.float32)
    b = rng.uniform(-1, 1, 6).astype(np.float32)
    xd, wd, bd = cupy.asarray(a), cupy.asarray(w), cupy.asarray(b)
    spatial_chunks = ((5, 1, 15), (8, 11))
    chunks = ((1, 1), (4,)) + spatial_chunks if layout == "NCHW" else \
        ((1, 1),) + spatial_chunks + ((4,),)
    x = da.from_array(xd, chunks=chunks)
    for kw in [dict(padding=1, groups=2),
               dict(stride=(2, 3), padding=(2, 1), dilation=(1, 2), groups=2)]:
        kw["layout"] = layout
        check(cd.conv(x, wd, bd, **kw), cupyconv.conv(xd, wd, bd, **kw), scheduler)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_conv_transpose_over_batch_chunks(scheduler):
    import cupy

    rng = np.random.default_rng(12)
    a = rng.uniform(-1, 1, (5, 4, 9, 7)).astype(np.float32)
    w = rng.uniform(-1, 1, (4, 3, 3, 2)).astype(np.float32)
    b = rng.uniform(-1, 1, 6).astype(np.float32)
    xd, wd, bd = cupy.asarray(a), cupy.asarray(w), cupy.asarray(b)
    kw = dict(stride=2, padding=1, output_padding=1, groups=2)
    x = da.from_array(xd, chunks=((2, 3), 4, 9, 7))
    check(cd.conv_transpose(x, wd, bd, **kw), cupyconv.conv_transpose(xd, wd, bd, **kw),
          scheduler)
    y = cd.conv_transpose(x, w, b, **kw).compute(scheduler=scheduler)
    np.testing.assert_allclose(cupy.asnumpy(y), reference.conv_transpose(a, w, b, **kw),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_separable_conv_over_batch_chunks(layout, scheduler):
    import cupy

    rng = np.random.default_rng([len(layout), 5])
    shape = (5, 6, 11, 13) if layout == "NCHW" else (5, 11, 13, 6)
    wdw = (12, 1, 3, 3) if layout == "NCHW" else (12, 3, 3, 1)
    wpw = (7, 12, 1, 1) if layout == "NCHW" else (7, 1, 1, 12)
    a, w1, w2 = (rng.uniform(-1, 1, s).astype(np.float32) for s in (shape, wdw, wpw))
    b1, b2 = (rng.uniform(-1, 1, n).astype(np.float32) for n in (12, 7))
    dev = [cupy.asarray(v) for v in (a, w1, w2, b1, b2)]
    kw = dict(stride=2, padding=1, activation="relu", layout=layout)
    x = da.from_array(dev[0], chunks=((2, 3),) + tuple((s,) for s in shape[1:]))
    for method in ("fused", "unfused"):
        check(cd.separable_conv(x, *dev[1:], method=method, **kw),
              cupyconv.separable_conv(*dev, method=method, **kw), scheduler)
    y = cd.separable_conv(x, w1, w2, b1, b2, **kw).compute(scheduler=scheduler)
    np.testing.assert_allclose(cupy.asnumpy(y), reference.separable_conv(a, w1, w2, b1, b2, **kw),
                               rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- dask_cuda cluster
@contextlib.contextmanager
def _cuda_cluster(gpus: int):
    """A ``dask_cuda.LocalCUDACluster`` of one worker process per GPU 0 .. gpus-1 and a client;
    the workers import cupyconv from this checkout, as this process does."""
    pytest.importorskip("dask_cuda")
    distributed = pytest.importorskip("distributed")
    from dask_cuda import LocalCUDACluster

    root = os.path.dirname(os.path.dirname(os.path.abspath(cupyconv.__file__)))
    path = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = path
    try:
        with LocalCUDACluster(n_workers=gpus, CUDA_VISIBLE_DEVICES=",".join(map(str, range(gpus))),
                              dashboard_address=None, protocol="tcp", silence_logs=40) as cluster:
            with distributed.Client(cluster) as client:
                yield client
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


@pytest.fixture(scope="module", params=["one-gpu", "every-gpu"])
def cuda_client(request):
    """A cluster on GPU 0 alone, then one with a worker on every GPU (skipped with fewer than
    two)."""
    import cupy

    gpus = 1 if request.param == "one-gpu" else cupy.cuda.runtime.getDeviceCount()
    if request.param == "every-gpu" and gpus < 2:
        pytest.skip("one GPU: the one-worker-per-GPU cluster needs two or more")
    with _cuda_cluster(gpus) as client:
        yield client, gpus


def test_local_cuda_cluster_matches_one_gpu(cuda_client):
    """Filters, signal correlation and convolutions of CuPy-chunked arrays computed by a
    LocalCUDACluster (one worker per GPU) equal the single-GPU whole-array calls, and every
    worker computed chunks."""
    import cupy

    import cupyconv.signal as cs

    client, gpus = cuda_client
    assert len(client.scheduler_info()["workers"]) == gpus
    # a client of several workers is the default scheduler: slabs move between them
    assert cd.halo_transfer() == ("slabs" if gpus > 1 else "chunks")
    a, xd = device_input(3, np.float32, 21)
    x = da.from_array(xd, chunks=CHUNKS[3])
    rng = np.random.default_rng(21)
    wn = cupy.asarray(rng.uniform(-1, 1, (3, 4, 2)).astype(np.float32))
    lazy = {"gaussian": (cd.gaussian_filter(x, 1.2, mode="mirror"),
                         cn.gaussian_filter(xd, 1.2, mode="mirror")),
            "correlate": (cd.correlate(x, wn, mode="wrap"), cn.correlate(xd, wn, mode="wrap")),
            "signal": (cd.signal_correlate(x, wn, "same"), cs.correlate(xd, wn, "same"))}
    img = cupy.asarray(rng.uniform(-1, 1, (9, 4, 14, 12)).astype(np.float32))
    w = rng.uniform(-1, 1, (6, 2, 3, 3)).astype(np.float32)   # NumPy: one key, one copy
    batch = da.from_array(img, chunks=(3, 4, 14, 12))
    lazy["conv"] = (cd.conv(batch, w, padding=1, groups=2),
                    cupyconv.conv(img, cupy.asarray(w), padding=1, groups=2))
    wide = da.from_array(img, chunks=(9, 4, 5, 7))               # spatial chunks with halos
    lazy["conv-spatial"] = (cd.conv(wide, w, stride=2, padding=1, groups=2),
                            cupyconv.conv(img, cupy.asarray(w), stride=2, padding=1, groups=2))
    # chunks generated on the workers (no input held by one of them): the scheduler spreads
    # them, so every worker runs filters on its own GPU (a lambda: pickled by value)
    gen = da.map_blocks(lambda block_info=None: cupy.random.RandomState(
        block_info[None]["chunk-location"][0]).uniform(-1, 1, block_info[None]["chunk-shape"],
                                                       dtype=cupy.float32),
        chunks=((6,) * 8, (11,), (13,)), dtype=np.float32,
        meta=cupy.empty((0, 0, 0), np.float32))
    spread = client.persist(cd.gaussian_filter(gen, 1.5, mode="reflect"))
    pytest.importorskip("distributed").wait(spread)
    holders = {worker for worker, keys in client.has_what().items() if keys}
    assert len(holders) == gpus, "a worker computed no chunk"
    lazy["spread"] = (spread, cn.gaussian_filter(gen.compute(scheduler="synchronous"), 1.5,
                                                 mode="reflect"))
    futures = client.compute([v[0] for v in lazy.values()])
    for (name, (_, whole)), future in zip(lazy.items(), futures):
        got = future.result()
        ref = cupy.asnumpy(whole)
        np.testing.assert_allclose(cupy.asnumpy(got), ref, rtol=2e-5,
                                   atol=2e-5 * max(1.0, float(np.abs(ref).max())), err_msg=name)


def test_distributed_volume_filters_match_one_gpu(cuda_client):
    """A CuPy volume generated on the workers and placed in one box of chunks per GPU
    (distribute): each box on its own worker, filters reading whole chunks on their worker and
    slabs across ("placed" halos with two or more GPUs) equal the single-GPU whole-array calls."""
    import cupy

    client, gpus = cuda_client
    gen = da.map_blocks(lambda block_info=None: cupy.random.RandomState(
        sum(block_info[None]["chunk-location"])).uniform(
            -1, 1, block_info[None]["chunk-shape"], dtype=cupy.float32),
        chunks=((12,) * 4, (10, 9), (16, 15)), dtype=np.float32,
        meta=cupy.empty((0, 0, 0), np.float32))
    x = cd.distribute(gen)
    owners = cd.chunk_owners(x)
    assert len(set(owners.values())) == gpus
    assert cd.halo_transfer(x) == ("placed" if gpus > 1 else "chunks")
    whole = cupy.asarray(x.compute())
    wn = cupy.asarray(np.random.default_rng(22).uniform(-1, 1, (5, 3, 4)).astype(np.float32))
    cases = {"gaussian": (cd.gaussian_filter(x, 1.4, mode="reflect"),
                          cn.gaussian_filter(whole, 1.4, mode="reflect")),
             "correlate wrap": (cd.correlate(x, wn, mode="wrap"),
                                cn.correlate(whole, wn, mode="wrap"))}
    for name, (lazy, ref) in cases.items():
        ref = cupy.asnumpy(ref)
        np.testing.assert_allclose(cupy.asnumpy(lazy.compute()), ref, rtol=2e-5,
                                   atol=2e-5 * max(1.0, float(np.abs(ref).max())), err_msg=name)
    assert cd.chunk_owners(x) == owners  # the gathers copied chunks; their homes stay


# --------------------------------------------------------------------------- NumPy chunks, gpu=True
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


# --------------------------------------------------------------------------- halo assembly
def test_cupy_blocks_are_assembled_on_the_device_and_trimmed_by_copy():
    """assemble_halo on CuPy chunks builds a CuPy block equal to the NumPy assembly of the same
    chunks, and a task's trimmed result is a C-contiguous CuPy array owning its memory (it does
    not pin the padded block)."""
    import cupy

    a = np.random.default_rng(41).uniform(-1, 1, (12, 10, 9)).astype(np.float32)
    chunks = ((4, 4, 4), (5, 5), (3, 6))
    axes = [cd._axis_pieces(c, r, b) for c, r, b in
            zip(chunks, ((2, 1), (0, 3), (2, 2)), ("periodic", "none", "none"))]
    bounds = [np.cumsum((0,) + c) for c in chunks]
    for idx in np.ndindex(3, 2, 2):
        sources, cuts, shape, present = cd._block_plan(idx, axes, chunks, remote=lambda nb: False)
        neighbours = tuple(nb for nb, _ in sources)
        host = [a[tuple(slice(bounds[ax][j], bounds[ax][j + 1]) for ax, j in enumerate(nb))]
                for nb in neighbours]
        dev = [cupy.asarray(p) for p in host]
        block = cd.assemble_halo(dev, cuts, shape)
        assert isinstance(block, cupy.ndarray) and block.shape == tuple(shape)
        np.testing.assert_array_equal(cupy.asnumpy(block), cd.assemble_halo(host, cuts, shape))
        interior = tuple(slice(lo, n - hi) for (lo, hi), n in zip(present, shape))
        out = cd._halo_task(lambda b: b * 2, cuts, shape, interior, *dev)
        assert isinstance(out, cupy.ndarray) and out.flags.c_contiguous and out.base is None
        np.testing.assert_array_equal(cupy.asnumpy(out), 2 * host[neighbours.index(idx)])
