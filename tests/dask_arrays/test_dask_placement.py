"""cupyconv.dask's placement (``cupyconv/dask/placement.py``), on a CPU (NumPy chunks): how a
filter task gets its halo (whole chunks or slab exports, bit-identical), and on a ``distributed``
cluster of in-process workers the chunk grid cut into one box per worker (block_owners), arrays
placed that way (distribute), and filters on a placed array reading whole chunks from their own
worker and slabs from the others ("placed" halos), bit-identical to the whole-array call."""

import itertools

import numpy as np
import pytest

pytest.importorskip("dask.array")
import dask  # noqa: E402
import dask.array as da  # noqa: E402
import scipy.ndimage as sn  # noqa: E402
from dask_cases import SHAPES, dask_of  # noqa: E402

import cupyconv.dask as cd  # noqa: E402


# --------------------------------------------------------------------------- block_owners
def _is_box(indices) -> bool:
    """True where ``indices`` fill the box their extremes span."""
    lo = np.min(indices, axis=0)
    hi = np.max(indices, axis=0) + 1
    return len(indices) == int(np.prod(hi - lo))


@pytest.mark.parametrize("numblocks", [(4, 4, 4), (3, 5), (7,), (2, 3, 1), (1, 1), (8, 2, 2),
                                       (5, 5, 5)])
@pytest.mark.parametrize("workers", [1, 2, 3, 4, 5, 8])
def test_block_owners_cuts_the_grid_into_balanced_boxes(numblocks, workers):
    owners = cd.block_owners(numblocks, workers)
    assert sorted(owners) == sorted(itertools.product(*(range(n) for n in numblocks)))
    by_worker: dict = {}
    for index, w in owners.items():
        assert 0 <= w < workers
        by_worker.setdefault(w, []).append(index)
    total = int(np.prod(numblocks))
    assert len(by_worker) == min(workers, total)  # every worker has chunks while chunks last
    for indices in by_worker.values():
        assert _is_box(indices)
    counts = [len(v) for v in by_worker.values()]
    if total % workers == 0 and workers <= max(numblocks) and workers in (1, 2, 4):
        assert max(counts) == min(counts)  # even cuts where the grid allows them


def test_block_owners_cuts_across_the_longest_axis():
    # 2 workers on 4 x 4 x 4: halves along axis 0 (the first of equal axes)
    owners = cd.block_owners((4, 4, 4), 2)
    assert all(w == (index[0] >= 2) for index, w in owners.items())
    # the longest axis is cut, so the face between the boxes is the smallest one
    owners = cd.block_owners((2, 6, 3), 2)
    assert all(w == (index[1] >= 3) for index, w in owners.items())
    with pytest.raises(ValueError, match="workers must be >= 1"):
        cd.block_owners((2, 2), 0)


# --------------------------------------------------------------------------- halo transfer modes
def _both_transfers(make):
    """``make()`` built under halo transfer "chunks" and "slabs", computed: the two results."""
    import dask

    out = []
    for transfer in ("chunks", "slabs"):
        with dask.config.set({"cupyconv.halo-transfer": transfer}):
            assert cd.halo_transfer() == transfer
            out.append(make().compute(scheduler="synchronous"))
    return out


@pytest.mark.parametrize("mode", ["reflect", "wrap", "constant", "mirror"])
@pytest.mark.parametrize("ndim", [1, 2, 3])
def test_slab_transfer_equals_chunk_transfer(ndim, mode):
    """Filter tasks fed by their neighbours' slab exports compute what tasks reading the whole
    neighbour chunks compute, bit for bit: thin chunks, asymmetric reaches (origins), periodic
    axes (a two-chunk axis takes both halos from the one neighbour), 'valid' windows."""
    rng = np.random.default_rng([ndim, 23])
    a = rng.standard_normal(SHAPES[ndim])
    x = dask_of(a, ndim)
    two = da.from_array(a, chunks=tuple((n // 2, n - n // 2) for n in a.shape))
    w = rng.standard_normal((3,) * ndim)
    makes = [lambda: cd.gaussian_filter(x, 1.1, mode=mode),
             lambda: cd.uniform_filter(x, 4, origin=1, mode=mode),
             lambda: cd.correlate(x, w, mode=mode, origin=-1),
             lambda: cd.gaussian_filter(two, 0.9, mode=mode),
             lambda: cd.signal_correlate(x, w, "same")]
    for make in makes:
        chunks, slabs = _both_transfers(make)
        np.testing.assert_array_equal(slabs, chunks)


def test_slab_graph_reads_slabs_not_chunks():
    """Under "slabs" a filter task reads its own chunk and one export per neighbour; an export
    holds only face slabs as thick as the halo (here 2 of a chunk's 4 rows per face)."""
    import dask

    a = np.random.default_rng(5).standard_normal((12, 12, 12))
    x = da.from_array(a, chunks=4)
    with dask.config.set({"cupyconv.halo-transfer": "slabs"}):
        y = cd.gaussian_filter(x, 0.5)  # radius 2
    layer = dict(y.dask.layers[y.name])
    tasks = {k: t for k, t in layer.items() if k[0] == y.name}
    exports = {k: t for k, t in layer.items() if k[0] != y.name}
    assert len(tasks) == y.npartitions == len(exports) == 27
    middle = tasks[(y.name, 1, 1, 1)].dependencies
    assert (x.name, 1, 1, 1) in middle and len(middle) == 27
    assert sum(dep[0] == x.name for dep in middle) == 1  # the rest are exports
    g = dict(y.__dask_graph__())
    export = dask.get(g, next(iter(exports)))
    assert export and all(min(s.shape) == 2 and max(s.shape) == 4 for s in export.values())
    np.testing.assert_array_equal(y.compute(scheduler="synchronous"),
                                  sn.gaussian_filter(a, 0.5))


def test_halo_transfer_setting():
    import dask

    assert cd.halo_transfer() == "chunks"  # no distributed client here
    with dask.config.set({"cupyconv.halo-transfer": "both"}):
        with pytest.raises(ValueError, match="halo-transfer"):
            cd.halo_transfer()


# --------------------------------------------------------------------------- on a cluster
@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster:
        with distributed.Client(cluster) as c:
            yield c


def _generated(shape, chunks):
    """A lazy float64 array whose chunks are drawn on the workers (no input held anywhere)."""
    def draw(block_info=None):
        info = block_info[None]
        rng = np.random.default_rng(list(info["chunk-location"]))
        return rng.standard_normal(info["chunk-shape"])

    return da.map_blocks(draw, chunks=da.core.normalize_chunks(chunks, shape), dtype=np.float64,
                         meta=np.empty((0,) * len(shape)))


def test_distribute_places_each_box_on_its_worker(client):
    x = _generated((24, 20, 12), (6, 5, 4))
    placed = cd.distribute(x)
    workers = sorted(client.scheduler_info()["workers"])
    want = {i: workers[w] for i, w in cd.block_owners(x.numblocks, len(workers)).items()}
    assert cd.chunk_owners(placed) == want
    np.testing.assert_array_equal(placed.compute(), x.compute())
    # an array already in memory (placed the scheduler's way) moves to the same boxes
    held = client.persist(x * 2)
    pytest.importorskip("distributed").wait(held)
    assert cd.chunk_owners(held) is not None
    moved = cd.distribute(held)
    assert cd.chunk_owners(moved) == want
    np.testing.assert_array_equal(moved.compute(), 2 * x.compute())


def test_distribute_checks_its_arguments(client):
    with pytest.raises(TypeError, match="dask.array.Array"):
        cd.distribute(np.zeros(4))
    assert cd.chunk_owners(_generated((8,), 4)) is None  # not computed yet


def _filters(w):
    return {"gaussian reflect": lambda x: cd.gaussian_filter(x, 1.3, mode="reflect"),
            "correlate wrap": lambda x: cd.correlate(x, w, mode="wrap", origin=(1, -1, -1)),
            "uniform mirror": lambda x: cd.uniform_filter(x, 3, mode="mirror")}


def _bundle_ends(key, owners) -> tuple:
    """(from worker, to worker) of a placed filter's slab export key ``(name, "from", i, "to",
    j)``, i and j numbering the sorted workers that own chunks."""
    assert key[1] == "from" and key[3] == "to" and len(key) == 5, key
    workers = sorted(set(owners.values()))
    return workers[key[2]], workers[key[4]]


def test_filters_on_placed_chunks_move_only_slabs_between_workers(client):
    """On an array placed in boxes, a filter task reads whole chunks of its own worker and slabs
    of the other's, all the slabs from one worker in one export task: only chunks on the face
    between the boxes export slabs (and, with wrap, the faces that wrap around), and results are
    bit-identical to the whole-array call."""
    x = cd.distribute(_generated((24, 15, 16), (6, 5, 8)))  # no chunk thinner than a halo
    a = x.compute()
    owners = cd.chunk_owners(x)
    assert cd.halo_transfer(x) == "placed"
    assert cd.halo_transfer() == "slabs"  # two workers, placement unknown
    w = np.random.default_rng(3).standard_normal((3, 2, 3))
    refs = {"gaussian reflect": sn.gaussian_filter(a, 1.3, mode="reflect"),
            "correlate wrap": sn.correlate(a, w, mode="wrap", origin=(1, -1, -1)),
            "uniform mirror": sn.uniform_filter(a, 3, mode="mirror")}
    for label, make in _filters(w).items():
        y = make(x)
        layer = dict(y.dask.layers[y.name])
        exports = {k: t for k, t in layer.items() if k[0] != y.name}
        assert len(exports) == 2, label  # one each way
        exporters = set()
        for key, task in exports.items():
            src, dst = _bundle_ends(key, owners)
            assert src != dst, label
            chunks = {d[1:] for d in task.dependencies}
            assert all(owners[j] == src for j in chunks), label
            exporters |= chunks
        for index, task in ((k[1:], t) for k, t in layer.items() if k[0] == y.name):
            chunk_deps = {d[1:] for d in task.dependencies if d[0] == x.name}
            export_deps = [d for d in task.dependencies if d[0] != x.name]
            assert all(owners[j] == owners[index] for j in chunk_deps), label
            assert all(_bundle_ends(d, owners)[1] == owners[index] for d in export_deps), label
        if label != "correlate wrap":  # no wrap: only the two box faces export
            assert {j[0] for j in exporters} == {1, 2}, label
        got = y.compute()
        if label.startswith("uniform"):
            np.testing.assert_allclose(got, refs[label], rtol=1e-13, atol=1e-13)
        else:
            np.testing.assert_array_equal(got, refs[label])
        # the same numbers as reading whole chunks everywhere
        with dask.config.set({"cupyconv.halo-transfer": "chunks"}):
            np.testing.assert_array_equal(make(x).compute(), got)


def test_placed_on_one_worker_reads_whole_chunks(client):
    x = _generated((12, 10), (4, 5))
    workers = sorted(client.scheduler_info()["workers"])
    held = client.persist(x, workers=workers[:1])
    pytest.importorskip("distributed").wait(held)
    assert set(cd.chunk_owners(held).values()) == {workers[0]}
    assert cd.halo_transfer(held) == "chunks"
    y = cd.gaussian_filter(held, 1.0)
    assert all(k[0] == y.name for k in dict(y.dask.layers[y.name]))  # no exports
    np.testing.assert_array_equal(y.compute(), sn.gaussian_filter(x.compute(), 1.0))


def test_three_workers_cut_two_axes_and_corners_cross(client):
    """Three workers: the grid is cut across two axes, so corner neighbours live on a third
    worker; every filter still equals the whole-array call, reading slabs only across workers."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster:
        with distributed.Client(cluster, set_as_default=False) as three:
            x = cd.distribute(_generated((20, 18, 9), (5, 6, 9)), client=three)
            with three.as_current():  # (the module's two-worker client stays the default)
                owners = cd.chunk_owners(x)
                assert len(set(owners.values())) == 3
                a = x.compute()
                w = np.random.default_rng(4).standard_normal((3, 3, 1))
                y = cd.correlate(x, w, mode="nearest")
                layer = dict(y.dask.layers[y.name])
                for index, task in ((k[1:], t) for k, t in layer.items() if k[0] == y.name):
                    for dep in task.dependencies:
                        if dep[0] == x.name:
                            assert owners[dep[1:]] == owners[index], (index, dep)
                        else:
                            src, dst = _bundle_ends(dep, owners)
                            assert dst == owners[index] != src, (index, dep)
                np.testing.assert_array_equal(y.compute(), sn.correlate(a, w, mode="nearest"))



def test_placed_filter_tasks_are_pinned_to_their_chunks_workers(client):
    """The filter and export tasks on a placed array carry strict worker restrictions (the
    scheduler may not move them, so work stealing cannot ship their chunks).  They are layer
    annotations: they reach the scheduler in a graph sent unoptimized (low-level fusion, which
    the scheduler runs on an optimized graph, drops every annotation; the scheduler then places
    each task by its inputs' bytes)."""
    distributed = pytest.importorskip("distributed")
    x = cd.distribute(_generated((24, 15, 16), (6, 5, 8)))
    owners = cd.chunk_owners(x)
    y = cd.gaussian_filter(x, 1.3)
    label, token = y.name.rsplit("-", 1)
    names = (y.name, f"{label}-slabs-{token}")
    held = client.persist(y, optimize_graph=False)
    distributed.wait(held)

    def restrictions(dask_scheduler, names=names):
        return {ts.key: (sorted(ts.worker_restrictions or ()), ts.loose_restrictions)
                for ts in dask_scheduler.tasks.values()
                if isinstance(ts.key, tuple) and ts.key[0] in names}

    seen = client.run_on_scheduler(restrictions)
    assert {k[0] for k in seen} == set(names)  # filters and exports
    for key, (workers, loose) in seen.items():
        home = owners[tuple(key[1:])] if key[0] == y.name else _bundle_ends(key, owners)[0]
        assert workers == [home] and not loose, key
    np.testing.assert_array_equal(held.compute(), sn.gaussian_filter(x.compute(), 1.3))


def test_a_placed_array_outlives_a_retired_worker():
    """Once a worker of a distributed array retires (its chunks moved to the others), the
    recorded placement is stale: chunk_owners reads where the chunks are instead, so filters pin
    nothing to the missing worker and finish, equal to the whole-array call."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster:
        with distributed.Client(cluster, set_as_default=False) as two:
            x = cd.distribute(_generated((16, 10, 8), (4, 5, 4)), client=two)
            with two.as_current():
                a = x.compute()
                workers = sorted(two.scheduler_info()["workers"])
                assert set(cd.chunk_owners(x).values()) == set(workers)
                two.retire_workers(workers[1:])
                assert sorted(two.scheduler_info()["workers"]) == workers[:1]
                assert set(cd.chunk_owners(x).values()) == {workers[0]}
                assert cd.halo_transfer(x) == "chunks"
                y = cd.uniform_filter(x, 3)
                got = two.compute(y, optimize_graph=False).result(timeout=60)
                np.testing.assert_allclose(got, sn.uniform_filter(a, 3), rtol=1e-13, atol=1e-13)
