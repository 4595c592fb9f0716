"""Placement on a ``distributed`` cluster: boxes of neighbouring chunks per worker
(:func:`block_owners`, :func:`distribute`), where a persisted array's chunks live
(:func:`chunk_owners`), the layer annotations that pin tasks to those workers (:func:`_pinned`), how
a filter task gets its halo (:func:`halo_transfer`) and the slab exports that move only the halo
between workers (:func:`_export_slabs`, :func:`_export_bundle`)."""

from __future__ import annotations

import functools
import itertools
import operator

from cupyconv.dask.chunks import _require_dask


# --------------------------------------------------------------------------- owners
def block_owners(numblocks: tuple, workers: int) -> dict:
    """``{chunk index: worker number}``: the chunk grid ``numblocks`` cut into ``workers``
    boxes of neighbouring chunks, their chunk counts as equal as the grid allows.  The grid is
    cut in two, in proportion to the workers on each side, across the axis that splits it most
    evenly (of equals the longest, by chunks, whose cut face is the smallest; then the first),
    and each part likewise, so a filter's halos cross few box faces.
    Workers beyond the number of chunks get none."""
    workers = operator.index(workers)
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    owners: dict = {}

    def cut(box: list, first: int, count: int) -> None:
        sizes = [stop - start for start, stop in box]
        if count == 1 or all(n <= 1 for n in sizes):
            for index in itertools.product(*(range(start, stop) for start, stop in box)):
                owners[index] = first
            return
        left = count // 2

        def split(a):  # (imbalance of chunks per worker, longer axes first, axis, cut at)
            at = min(max(round(sizes[a] * left / count), 1), sizes[a] - 1)
            return abs(at * count - sizes[a] * left) / sizes[a], -sizes[a], a, box[a][0] + at

        _, _, ax, at = min(split(a) for a in range(len(box)) if sizes[a] > 1)
        cut(box[:ax] + [(box[ax][0], at)] + box[ax + 1:], first, left)
        cut(box[:ax] + [(at, box[ax][1])] + box[ax + 1:], first + left, count - left)

    cut([(0, int(n)) for n in numblocks], 0, workers)
    return owners


def _client():
    """The default ``distributed`` client, or None (no distributed, or no client)."""
    try:
        from distributed import default_client
        return default_client()
    except (ImportError, ValueError):
        return None


def _held_futures(x) -> list | None:
    """The futures of ``x``'s chunks, in key order, where a ``distributed`` client is the
    default and ``x`` is persisted; else None.  A persisted array's own layer maps each of its
    keys to a future: only that layer is read (walking a large unpersisted graph for futures
    would cost every filter call)."""
    if _client() is None:
        return None
    from dask.core import flatten
    from dask.highlevelgraph import MaterializedLayer
    from distributed import Future

    layer = x.dask.layers.get(x.name)
    if not isinstance(layer, MaterializedLayer):
        return None
    keys = list(flatten(x.__dask_keys__()))
    held = [layer.get(k) for k in keys]
    if not keys or not all(isinstance(f, Future) and f.key == k for f, k in zip(held, keys)):
        return None
    return held


def chunk_owners(x) -> dict | None:
    """``{chunk index: worker address}`` of a dask array whose every chunk is held in the memory
    of a ``distributed`` cluster (persisted), else None (chunks still to compute, or no
    cluster).  For an array from :func:`distribute`, the placement it made while all its
    workers are in the cluster; otherwise where the scheduler says the chunks are, a chunk held
    by several workers (copies made when a task on another worker read it, e.g. a ``compute``
    gathering the array) counting as the one among them holding the fewest chunks of ``x``: its
    home, where the copies came from.  (Filters pin their tasks to these owners: a recorded
    owner that has left would stall them, hence the check.)"""
    held = _held_futures(x)
    if held is None:
        return None
    client = held[0].client
    where = (x.dask.layers[x.name].annotations or {}).get("workers")
    if isinstance(where, functools.partial) and where.func is _worker_of:  # distribute()'s
        recorded = dict(where.args[0])
        if set(recorded.values()) <= set(client.scheduler_info()["workers"]):
            return recorded
    keys = [f.key for f in held]
    who = client.who_has(held)
    if not all(who.get(k) for k in keys):
        return None
    counts: dict = {}
    for k in keys:
        for w in who[k]:
            counts[w] = counts.get(w, 0) + 1
    return {tuple(k[1:]): min(who[k], key=lambda w: (counts[w], w)) for k in keys}


# --------------------------------------------------------------------------- pins
def _worker_of(owners: dict, ndim: int, key, others=None):
    """The worker restriction (a list of one address) of a task key ``(layer, *chunk index)``
    whose index is in ``owners``, or of a key in ``others`` (key -> address), else None (no
    restriction): a layer annotation."""
    if others and key in others:
        return [others[key]]
    if isinstance(key, tuple) and len(key) == ndim + 1 and key[1:] in owners:
        return [owners[key[1:]]]
    return None


def _pinned(owners: dict, ndim: int, others=None) -> dict:
    """Layer annotations that run each chunk-grid task ``(layer, *index)`` on the worker
    ``owners[index]``, and no other.  Strict, because the scheduler's work stealing may move a
    task with a mere preference, and then its whole chunk, to another worker (2 x H200: 9 of one
    GPU's 32 filter tasks of 512^3 chunks ran on the other GPU, fetching 512 MB each;
    notes/dask.md).  The price: a task pinned to a worker that leaves the cluster during its
    compute waits for it (dask's "no-worker" state); graphs built after it left pin to where
    its chunks went (:func:`chunk_owners`).
    Being layer annotations, the pins reach the scheduler in graphs sent unoptimized
    (``compute(..., optimize_graph=False)``, as :func:`distribute` persists): the optimization,
    run on the scheduler, fuses tasks and drops every annotation.  The scheduler then puts each
    task where most of its inputs' bytes are, which for a placed array's filters is the same
    worker, but may steal tasks whose compute time is long against moving their inputs.
    ``others``: more keys (not chunk-grid ones) -> the worker each runs on."""
    return {"workers": functools.partial(_worker_of, owners, ndim, others=others),
            "allow_other_workers": False}


def distribute(x, client=None):
    """``x`` computed into the memory of a ``distributed`` cluster with its chunk grid cut into
    one box of neighbouring chunks per worker (:func:`block_owners`; workers in address order),
    and returned as a dask array of those chunks (like ``client.persist``, but placed).

    Filters of this module on the result take the halo of a chunk from neighbours on the same
    worker as it is (no copy) and from neighbours on other workers as slabs (only the halo moves):
    a one-worker-per-GPU cluster then moves only the slabs on the boxes' faces, where chunks
    persisted the scheduler's way interleave over the workers and nearly every halo crosses
    between them.  Each task of ``x``'s graph whose key is a chunk of ``x``'s grid runs on that
    chunk's worker (so generating or loading layers run where their chunks stay; other tasks run
    where the scheduler puts them); an ``x`` already held moves once, chunk by chunk.  Those tasks
    and the filters' tasks on the result are pinned to their workers (:func:`_pinned`; computed
    with ``optimize_graph=False``, since the scheduler's fusion drops the pins): a worker that
    leaves the cluster while they run stalls them.
    A filter whose halo is thicker than some chunk merges chunks first (:func:`rechunk_for_depth`)
    and so works on a new, unplaced array: give placed arrays chunks at least that thick.
    On GPUs linked by NVLink, give the cluster UCX and CuPy an RMM pool
    (``LocalCUDACluster(protocol="ucx", rmm_pool_size=..., rmm_allocator_external_lib_list=
    ["cupy"])``): 2 x H200, a filter's 134 MB of slabs crossed in 65 ms from CuPy's own pool,
    in 3.4 ms from RMM's (most likely CUDA IPC mapping each new allocation a transfer reads).
    ``client``: default the default client.  Returns when every chunk is in memory."""
    import copy

    x = _require_dask(x, "x")
    try:
        import distributed
    except ImportError as exc:
        raise ImportError("cupyconv.dask.distribute needs a distributed cluster: "
                          "pip install distributed (and dask-cuda for GPU workers)") from exc
    if client is None:
        client = _client()
        if client is None:
            raise ValueError("distribute: no distributed client; pass client= or create a "
                             "distributed.Client first")
    workers = sorted(client.scheduler_info()["workers"])
    if not workers:
        raise ValueError("distribute: the cluster has no workers")
    owners = {index: workers[w] for index, w in block_owners(x.numblocks, len(workers)).items()}
    if _held_futures(x) is not None:
        # already in memory: annotations would not move it, so a no-copy layer does
        x = x.map_blocks(_same_chunk, dtype=x.dtype, meta=x._meta)
    where = _pinned(owners, x.ndim)
    layers = {}
    for name, layer in x.dask.layers.items():
        layer = copy.copy(layer)
        layer.annotations = {**(layer.annotations or {}), **where}
        layers[name] = layer
    from dask.array import Array
    from dask.highlevelgraph import HighLevelGraph

    placed = Array(HighLevelGraph(layers, dict(x.dask.dependencies)), x.name, x.chunks,
                   meta=x._meta)
    # no graph optimization: fusing layers would merge their annotations away
    held = client.persist(placed, optimize_graph=False)
    with client.as_current():  # (wait asks the default client, which may be another one)
        distributed.wait(held)
    # the placement travels with the array (chunk_owners reads it): where a task on another
    # worker later copies a chunk, who holds it no longer says where it lives
    held.dask.layers[held.name].annotations = where
    return held


def _same_chunk(block):
    return block


# --------------------------------------------------------------------------- halo sources
def halo_transfer(x=None) -> str:
    """How filter tasks get their halo: "chunks" (a task reads its neighbours' whole chunks: no
    copies, one task per chunk; right on one machine, where a chunk is shared, not moved),
    "slabs" (each chunk also exports its face slabs in one more task, and a filter task reads
    those: a distributed scheduler then moves slabs between workers instead of whole chunks) or,
    for an ``x`` whose chunks a cluster holds (:func:`chunk_owners`) on two or more workers,
    "placed": whole chunks from neighbours on the task's worker, slabs from the others (all
    that one worker reads from another exported in one task, to cross in one message).
    The dask config key ``cupyconv.halo-transfer`` ("auto", "chunks", "slabs"); "auto" (the
    default): "placed" where that holds, else "slabs" while a ``distributed`` client with two or
    more workers is the default scheduler when the graph is built, else "chunks" (a one-worker
    cluster moves nothing: 2 x H200, 1024^3 gaussian in 256^3 chunks on one worker, 28 GB/s
    with chunks, 15 with slabs)."""
    return _halo_sources(x)[0]


def _halo_sources(x=None):
    """``(halo_transfer, owners)``: :func:`halo_transfer`'s choice and, for "placed", the
    chunk owners it was made from."""
    import dask

    choice = dask.config.get("cupyconv.halo-transfer", "auto")
    if choice not in ("auto", "chunks", "slabs"):
        raise ValueError(f"dask config cupyconv.halo-transfer must be 'auto', 'chunks' or "
                         f"'slabs', got {choice!r}")
    if choice != "auto":
        return choice, None
    client = _client()
    if client is None:
        return "chunks", None
    owners = chunk_owners(x) if x is not None else None
    if owners is not None:
        return ("placed", owners) if len(set(owners.values())) > 1 else ("chunks", None)
    return ("slabs" if len(client.scheduler_info()["workers"]) > 1 else "chunks"), None


def _slab_from(transfer: str, owners, home, which) -> bool:
    """Whether the neighbour ``which`` of a chunk on worker ``home`` gives its halo piece as a
    slab under ``transfer``: never ("chunks"), always ("slabs"), or where it lives on another
    worker ("placed", ``owners`` the chunk index -> worker map)."""
    if transfer == "placed":
        return owners[which] != home
    return transfer == "slabs"


# --------------------------------------------------------------------------- slab export
def _export_slabs(chunk, wanted):
    """``{(axis, side, thickness): slab}`` of ``chunk`` for each of ``wanted``: its high end
    (side -1: what the neighbour after it reads as its left halo) or its low end (+1), as
    contiguous copies, so that a distributed scheduler moves slabs between workers, not
    chunks."""
    out = {}
    for axis, side, thick in wanted:
        n = chunk.shape[axis]
        cut = [slice(None)] * chunk.ndim
        cut[axis] = slice(n - thick, n) if side < 0 else slice(0, thick)
        out[(axis, side, thick)] = chunk[tuple(cut)].copy()
    return out


def _export_bundle(wanted, *chunks):
    """``{(chunk index, slab key): slab}``: :func:`_export_slabs` of each of ``chunks`` for its
    ``(chunk index, slab keys)`` in ``wanted`` (same order), as one task's result: everything
    one worker reads from another is one task for the scheduler (~1 ms of its time each) and
    crosses in one message, where an export per boundary chunk made as many (a worker fetches
    from a peer one message at a time, each of at most ``distributed.worker.transfer.
    message-bytes-limit``, 50 MB by default).  (Measured on 2 x H200: no gain beyond the noise;
    what made the slabs slow was CuPy's allocator, see :func:`distribute`; notes/dask.md,
    "Session 26".)"""
    out = {}
    for (index, slabs), chunk in zip(wanted, chunks):
        for slab, piece in _export_slabs(chunk, slabs).items():
            out[(index, slab)] = piece
    return out
