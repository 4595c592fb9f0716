"""cupyconv.dask's graph layers on a CPU (``cupyconv/dask/graph.py``): one task per output chunk
reading only the neighbours its halo reaches, the 'valid' windows, deterministic names, culling,
every scheduler, and graphs whose tasks pickle by module path and run in another process."""

import numpy as np
import pytest

pytest.importorskip("dask.array")  # "dask" alone could resolve to this folder as a namespace
import dask.array as da  # noqa: E402
import scipy.ndimage as sn  # noqa: E402

import cupyconv.dask as cd  # noqa: E402
from cupyconv import reference  # noqa: E402


# --------------------------------------------------------------------------- one task per chunk
def _tasks(y) -> int:
    return len(dict(y.__dask_graph__()))


@pytest.mark.parametrize("call", [
    lambda x: cd.gaussian_filter(x, 1.0),
    lambda x: cd.gaussian_filter(x, 1.0, mode="wrap"),
    lambda x: cd.correlate(x, np.ones((3, 2, 4)), origin=(1, 0, -2)),
    lambda x: cd.uniform_filter1d(x, 3, axis=1),
    lambda x: cd.sobel(x, axis=2, mode="mirror"),
])
def test_one_task_per_output_chunk(call):
    """The filter is one layer of one task per output chunk, and the whole graph is the input's
    tasks (those of the rechunk where thin chunks were merged) plus one task per output chunk."""
    x = da.from_array(np.zeros((12, 14, 16)), chunks=(4, (7, 7), (5, 5, 6)))
    y = call(x)
    layer = y.dask.layers[y.name]
    assert len(layer) == y.npartitions == x.npartitions
    assert set(dict(layer)) == {(y.name,) + i for i in np.ndindex(y.numblocks)}
    assert _tasks(y) == _tasks(x) + y.npartitions
    # thin chunks: the rechunk's tasks, then one per output chunk
    thin = da.from_array(np.zeros((12, 14, 16)), chunks=(1, (7, 7), (5, 1, 10)))
    y = call(thin)
    assert len(y.dask.layers[y.name]) == y.npartitions
    assert _tasks(y) == _tasks(thin.rechunk(y.chunks)) + y.npartitions


def test_a_task_reads_only_the_neighbours_its_halo_reaches():
    """The middle chunk of a 3x3x3 grid reads all 27 chunks with a halo along every axis, 3 with
    a halo along one axis, 2 with a halo on one side of one axis; corner chunks fewer."""
    x = da.from_array(np.zeros((12, 12, 12)), chunks=4)
    cases = [(cd.gaussian_filter(x, 1.0), 27, 8),
             (cd.gaussian_filter1d(x, 1.0, axis=1), 3, 2),
             (cd.correlate1d(x, np.ones(3), axis=0, origin=1), 2, 1)]  # reach (2, 0)
    for y, middle, corner in cases:
        layer = dict(y.dask.layers[y.name])
        assert len(layer[(y.name, 1, 1, 1)].dependencies) == middle
        assert len(layer[(y.name, 0, 0, 0)].dependencies) == corner
        assert all(dep[0] == x.name for task in layer.values() for dep in task.dependencies)


def test_windows_are_one_task_per_chunk_and_read_the_weights_key():
    rng = np.random.default_rng(8)
    a, w = rng.standard_normal((29, 31)), rng.standard_normal((4, 3))
    y = cd.signal_correlate(da.from_array(a, chunks=(8, 10)), w, "same")
    layer = dict(y.dask.layers[y.name])
    assert len(layer) == y.npartitions
    weights = [k for k in dict(y.__dask_graph__()) if not isinstance(k, tuple)]
    assert len(weights) == 1 and all(weights[0] in t.dependencies for t in layer.values())
    import scipy.signal as ss

    np.testing.assert_allclose(y.compute(), ss.correlate(a, w, "same"), rtol=1e-12, atol=1e-12)


# --------------------------------------------------------------------------- schedulers, names, culling
@pytest.mark.parametrize("scheduler", ["synchronous", "threads", "distributed"])
def test_schedulers(scheduler):
    rng = np.random.default_rng(17)
    a = rng.standard_normal((13, 11, 9))
    x = da.from_array(a, chunks=(4, (5, 6), 3))
    img, w = rng.standard_normal((2, 3, 17, 15)), rng.standard_normal((4, 3, 3, 3))
    lazy = [(cd.gaussian_filter(x, 1.0, mode=("wrap", "mirror", "nearest")),
             sn.gaussian_filter(a, 1.0, mode=("wrap", "mirror", "nearest"))),
            (cd.correlate(x, np.ones((2, 3, 4)), origin=(0, 1, -2)),
             sn.correlate(a, np.ones((2, 3, 4)), origin=(0, 1, -2))),
            (cd.conv(da.from_array(img, chunks=(1, 3, 6, 7)), w, stride=2, padding=1),
             reference.conv(img, w, stride=2, padding=1))]
    if scheduler == "distributed":
        distributed = pytest.importorskip("distributed")
        with distributed.Client(processes=False, n_workers=1, threads_per_worker=2,
                                dashboard_address=None) as client:
            got = client.compute([y for y, _ in lazy], sync=True)
    else:
        got = [y.compute(scheduler=scheduler) for y, _ in lazy]
    for g, (_, ref) in zip(got, lazy):
        np.testing.assert_allclose(g, ref, rtol=1e-12, atol=1e-12)


def test_names_are_deterministic():
    x = da.from_array(np.zeros((20, 20)), chunks=7)
    assert cd.gaussian_filter(x, 1.0).name == cd.gaussian_filter(x, 1.0).name
    assert cd.gaussian_filter(x, 1.0).name != cd.gaussian_filter(x, 1.5).name
    assert cd.gaussian_filter(x, 1.0).name != cd.gaussian_filter(x, 1.0, mode="wrap").name
    assert cd.correlate(x, np.ones((3, 3))).name == cd.correlate(x, np.ones((3, 3))).name
    assert cd.correlate(x, np.ones((3, 3))).name != cd.correlate(x, np.full((3, 3), 2.0)).name
    assert cd.gaussian_filter(x, 1.0).name != cd.gaussian_filter(x, 1.0, gpu=True).name
    w = np.ones((2, 1, 3, 3))
    img = da.from_array(np.zeros((1, 1, 20, 20)), chunks=(1, 1, 7, 7))
    assert cd.conv(img, w, padding=1).name == cd.conv(img, w, padding=1).name
    assert cd.conv(img, w, padding=1).name != cd.conv(img, 2 * w, padding=1).name


def test_slices_cull_the_graph():
    a = np.random.default_rng(4).standard_normal((30, 28))
    y = cd.gaussian_filter(da.from_array(a, chunks=(6, 7)), 1.0, mode="wrap")
    x_name = next(iter(y.dask.dependencies[y.name]))
    part = y[:6, 7:14]
    culled = dict(part.dask.cull({k for row in part.__dask_keys__() for k in row}))
    # the one chunk's task and the 9 input chunks around it (wrapping at the top), no more
    assert [k for k in culled if k[0] == y.name] == [(y.name, 0, 1)]
    assert sorted(k[1:] for k in culled if k[0] == x_name) == [
        (r, c) for r in (0, 1, 4) for c in (0, 1, 2)]
    np.testing.assert_array_equal(part.compute(), sn.gaussian_filter(a, 1.0, mode="wrap")[:6, 7:14])


# --------------------------------------------------------------------------- pickling
def test_graphs_pickle_by_module_path_and_run_in_a_fresh_process():
    """A distributed worker receives tasks pickled: every function a graph names (chunk
    functions, halo tasks, slab exports, weights, worker pins) must load by its module path in
    another interpreter and compute the same result there."""
    import pickle
    import subprocess
    import sys

    import dask

    from cupyconv.dask import placement

    rng = np.random.default_rng(12)
    a = rng.standard_normal((20, 18))
    x = da.from_array(a, chunks=(7, 6))
    graphs = [cd.gaussian_filter(x, 1.0, mode="wrap"),
              cd.signal_correlate(x, np.ones((3, 2)), "same"),
              cd.conv(da.from_array(rng.standard_normal((2, 3, 9, 9)), chunks=(1, 3, 4, 4)),
                      rng.standard_normal((2, 3, 3, 3)), padding=1),
              cd.separable_conv(da.from_array(rng.standard_normal((4, 2, 6, 6)), chunks=2),
                                np.ones((2, 1, 3, 3)), np.ones((3, 2, 1, 1)), padding=1)]
    with dask.config.set({"cupyconv.halo-transfer": "slabs"}):
        graphs.append(cd.uniform_filter(x, 3))
    expected = [float(y.compute(scheduler="synchronous").sum()) for y in graphs]
    pins = placement._pinned({(0, 0): "tcp://a", (0, 1): "tcp://b"}, 2)
    blob = pickle.dumps((graphs, pins))
    code = ("import pickle, sys; graphs, pins = pickle.loads(sys.stdin.buffer.read()); "
            "print(pins['workers'](('name', 0, 1))); "
            "print(*[float(y.compute(scheduler='synchronous').sum()) for y in graphs])")
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True,
                         check=True, env=dict(__import__("os").environ, PYTHONPATH=_root()))
    pinned, sums = out.stdout.decode().splitlines()
    assert pinned == "['tcp://b']"
    np.testing.assert_allclose([float(s) for s in sums.split()], expected, rtol=1e-12)


def _root() -> str:
    """This checkout, first on the path of a child interpreter (as a worker's would be)."""
    import os

    import cupyconv

    root = os.path.dirname(os.path.dirname(os.path.abspath(cupyconv.__file__)))
    return os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
