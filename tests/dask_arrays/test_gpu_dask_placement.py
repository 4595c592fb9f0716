"""cupyconv.dask on a ``dask_cuda.LocalCUDACluster`` (one worker process per GPU, so every task is
pickled to a worker): results equal the single-GPU whole-array calls, every worker computes chunks,
and a ``distribute``d volume keeps each box on its GPU."""

import contextlib
import os

import numpy as np
import pytest

pytest.importorskip("dask.array")  # "dask" alone could resolve to this folder as a namespace
import dask.array as da  # noqa: E402
from dask_gpu_cases import CHUNKS, device_input  # noqa: E402

import cupyconv  # noqa: E402
import cupyconv.dask as cd  # noqa: E402
import cupyconv.ndimage as cn  # noqa: E402

pytestmark = pytest.mark.gpu


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
