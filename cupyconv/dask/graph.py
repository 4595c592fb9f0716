"""The graph layers: :func:`_halo_map` (a chunk function over the chunks of an array, each with a
halo of its neighbours' data, ONE task per output chunk) and :func:`_map_windows` (the 'valid'
windows of a zero-padded array, for the signal functions and spatially chunked convolutions).
They join the halo plans (:mod:`cupyconv.dask.halo`) with where the halo comes from and where the
tasks run (:mod:`cupyconv.dask.placement`)."""

from __future__ import annotations

import functools
import itertools

from cupyconv.dask.chunks import _contiguous_block, _dask_array, _staged
from cupyconv.dask.halo import (_axis_pieces, _block_plan, _halo_task, _sourced_halo_task,
                                window_chunks)
from cupyconv.dask.placement import (_export_bundle, _export_slabs, _halo_sources, _pinned,
                                     _slab_from)


# One task per output chunk: its arguments are the input chunks its halo reaches into (the chunk
# itself and, per axis with a halo, the neighbour on each side; corners where two halos meet)
# and static cutting plans; the task assembles the chunk with its halo in one allocation, runs
# the block function and trims.  map_overlap's graph (a getitem per slab, a concatenate per
# chunk, a trim per chunk: ~10 tasks per chunk in 3-d) gives the same result but costs more in
# the scheduler than the filters do on a GPU (benchmarks/notes/dask.md, "Issue 19").
def _halo_map(x, reach: dict, boundary: dict, block_fn, dtype, meta, out_chunks=None,
              trim=True, kwargs=None, label="halo"):
    """``block_fn`` over the chunks of ``x``, each with a halo of its neighbours' data: a dask
    array with ONE task per output chunk (map_overlap's semantics with ``boundary`` "none" or
    "periodic" and, with ``trim``, its trimming, without its per-slab tasks).

    ``reach``: axis -> (left, right) halo depths (asymmetric allowed; axes left out or with
    (0, 0) read no neighbours); every chunk must be at least as thick as the halo it feeds
    (:func:`rechunk_for_depth` with the larger side).  ``boundary``: axis -> "none" (no halo at
    the array's edges; with ``trim``, the block function's mode extends the edge chunks, whose
    inward halo then also covers what a mirror mode reflects) or "periodic" (the halo there
    comes from the far end); an axis of one chunk gets no halo.  ``trim``: cut the halo present
    off each result (see :func:`_halo_task`); ``trim=False`` keeps
    ``block_fn``'s whole result, whose chunks are ``out_chunks`` (default: the input's).  The
    halo comes from the neighbours' chunks or, on a cluster, their slabs (:func:`halo_transfer`:
    then one export task more per chunk that a task on another worker reads or, "placed", per
    pair of workers: all the slabs one worker reads from another, in one message).  ``kwargs``
    pass to ``block_fn``; dask collections among them (e.g. :func:`_shared` weights) are
    computed once and passed by key.  The layer's name is a token of the input, the function,
    the halo, the arguments and the halo sources: equal calls give equal graphs."""
    import dask
    from dask._task_spec import Task, TaskRef
    from dask.array import Array
    from dask.base import tokenize
    from dask.highlevelgraph import HighLevelGraph

    kwargs = dict(kwargs or {})
    reach_t = tuple(tuple(int(r) for r in reach.get(ax, (0, 0))) for ax in range(x.ndim))
    boundary_t = tuple(boundary.get(ax, "none") for ax in range(x.ndim))
    for ax, b in enumerate(boundary_t):
        if b not in ("none", "periodic"):
            raise ValueError(f"boundary[{ax}] must be 'none' or 'periodic', got {b!r}")
    if out_chunks is None:
        out_chunks = x.chunks
    out_chunks = tuple(tuple(int(c) for c in cs) for cs in out_chunks)
    transfer, owners = _halo_sources(x)
    token = tokenize(x.name, block_fn, reach_t, boundary_t, out_chunks, trim, dtype, kwargs,
                     transfer, sorted((owners or {}).items()))
    name = f"{label}-{token}"
    collections = [v for v in kwargs.values() if dask.is_dask_collection(v)]
    kwarg_refs = {k: TaskRef(v.key) if dask.is_dask_collection(v) else v
                  for k, v in kwargs.items()}
    axes = [_axis_pieces(x.chunks[ax], reach_t[ax], boundary_t[ax], edge_mode=trim)
            for ax in range(x.ndim)]
    export_name = f"{label}-slabs-{token}"
    # placed: one export per pair of workers (_export_bundle); else one per chunk read
    workers = sorted(set(owners.values())) if transfer == "placed" else []
    wanted: dict = {}  # export key -> {chunk index: the (axis, side, thickness) slabs read}
    dsk = {}
    for index in itertools.product(*(range(len(c)) for c in x.chunks)):
        remote = functools.partial(_slab_from, transfer, owners, (owners or {}).get(index))
        sources, cuts, shape, present = _block_plan(index, axes, x.chunks, remote)
        interior = None
        if trim and any(lo or hi for lo, hi in present):
            interior = tuple(slice(lo, n - hi) for (lo, hi), n in zip(present, shape))
        key = (name,) + index
        if all(slab is None for _, slab in sources):
            dsk[key] = Task(key, _halo_task, block_fn, cuts, shape, interior,
                            *(TaskRef((x.name,) + j) for j, _ in sources), **kwarg_refs)
            continue
        inputs: dict = {}  # task key read -> its position among this task's inputs
        picks = []
        for which, slab in sources:
            pick = slab
            if slab is None:
                ref = (x.name,) + which
            elif workers:  # (string parts: never taken for a chunk index by _worker_of)
                ref = (export_name, "from", workers.index(owners[which]),
                       "to", workers.index(owners[index]))
                pick = (which, slab)
            else:
                ref = (export_name,) + which
            if slab is not None:
                wanted.setdefault(ref, {}).setdefault(which, set()).add(slab)
            picks.append((inputs.setdefault(ref, len(inputs)), pick))
        dsk[key] = Task(key, _sourced_halo_task, block_fn, cuts, shape, interior, tuple(picks),
                        *(TaskRef(ref) for ref in inputs), **kwarg_refs)
    exporters = {}  # bundle key -> the worker whose chunks it exports
    for key, per_chunk in wanted.items():
        items = tuple((j, tuple(sorted(slabs))) for j, slabs in sorted(per_chunk.items()))
        if workers:
            dsk[key] = Task(key, _export_bundle, items,
                            *(TaskRef((x.name,) + j) for j, _ in items))
            exporters[key] = workers[key[2]]
        else:
            ((j, slab_keys),) = items
            dsk[key] = Task(key, _export_slabs, TaskRef((x.name,) + j), slab_keys)
    # each task where its chunk lives, also where copies exist elsewhere
    placement = _pinned(owners, x.ndim, exporters) if owners is not None else {}
    with dask.annotate(**placement):
        graph = HighLevelGraph.from_collections(name, dsk, dependencies=[x, *collections])
    return Array(graph, name, out_chunks, meta=meta)


def _map_windows(x, windows: dict, whole: dict, block_fn, dtype, gpu=None, **kwargs):
    """Map ``block_fn`` over ``x`` where each output reads a window of the zero-padded input.

    ``windows``: axis -> (pad_lo, pad_hi, extent, stride); along such an axis output ``o`` reads
    padded inputs ``o * stride`` to ``o * stride + extent``, and ``block_fn`` computes the 'valid'
    (unpadded) result of its block with a right halo of ``extent`` (the blocks' windows tile the
    output exactly, see :func:`window_chunks`).  ``whole``: axis -> output size for axes made one
    chunk (e.g. channels).  Other axes keep their chunks and their size.  The zero padding is a
    ``da.pad`` before the map, so a block never needs to know where it lies.  ``kwargs`` pass to
    ``block_fn`` (dask keys among them are computed first, once); ``gpu``: see :func:`_staged`."""
    da = _dask_array()
    from dask.array.utils import meta_from_array

    pads = [(0, 0)] * x.ndim
    for ax, (lo, hi, _, _) in windows.items():
        pads[ax] = (int(lo), int(hi))
    if any(lo or hi for lo, hi in pads):
        x = da.pad(x, pads, mode="constant", constant_values=0)
    in_chunks, out_chunks, reach = list(x.chunks), list(x.chunks), {}
    for ax in range(x.ndim):
        if ax in windows:
            _, _, extent, stride = windows[ax]
            in_chunks[ax], out_chunks[ax] = window_chunks(x.chunks[ax], extent, stride)
            reach[ax] = (0, int(extent))  # a window reaches right only
        elif ax in whole:
            in_chunks[ax], out_chunks[ax] = (x.shape[ax],), (int(whole[ax]),)
    if tuple(in_chunks) != x.chunks:
        x = x.rechunk(tuple(in_chunks))
    meta = meta_from_array(x, ndim=x.ndim, dtype=dtype)
    block_fn = _staged(functools.partial(_contiguous_block, block_fn), gpu)
    # boundary "none": the last block simply has no right halo, and its output count
    # (window_chunks) already accounts for that; the results are not trimmed
    return _halo_map(x, reach, {}, block_fn, dtype, meta, out_chunks=tuple(out_chunks),
                     trim=False, kwargs=kwargs, label="windows")
