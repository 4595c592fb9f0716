"""``cupyconv.ndimage`` filters and ``cupyconv.conv`` on Dask arrays (``pip install 'cupyconv[dask]'``).

Every function takes a ``dask.array.Array`` and returns one, lazily: nothing runs until
``.compute()``.  A filter is one graph layer with ONE task per output chunk (:func:`_halo_map`):
the task reads the chunk and the neighbours its halo reaches into (as deep as the filter reaches
on each side along each axis, from the filter size, sigma/truncate/radius and origin -- left and
right may differ), assembles the chunk with its halo in one allocation (:func:`assemble_halo`),
filters it and trims the halo off, so every output element is computed from the same inputs as in
one call on the whole array.  The semantics are ``dask.array.map_overlap``'s with boundary "none"
or "periodic" and ``trim=True``; its graph (a getitem per slab, a concatenate and a trim per chunk)
cost more in the scheduler than the filters take on a GPU.  With ``scipy.ndimage`` the result is
bit-identical except for the uniform filters (SciPy's running sum starts at each chunk); with
``cupyconv.ndimage`` a chunk may run another kernel than the whole array (fused or not, tiled or
direct), so results agree to rounding.

- At the array's edge there is no halo (``boundary="none"``): the chunk touches the edge, and the
  filter's own ``mode`` extends it exactly as it extends the whole array (an edge chunk's inward
  halo is then at least as deep as the mode reflects).  ``mode="wrap"`` (and ``"grid-wrap"``)
  read the far end of the axis, so those axes take their halo from there
  (``boundary="periodic"``).  An axis filtered with both wrap and another mode (possible with
  per-axis modes) is made one chunk.
- Chunks thinner than the halo are merged with their neighbours first (:func:`rechunk_for_depth`);
  an axis held in one chunk needs no halo at all.  Filters without any halo are a ``map_blocks``.
- Each chunk is dispatched on its array type (:func:`_backend`): CuPy chunks run
  ``cupyconv.ndimage``; NumPy chunks run ``scipy.ndimage``, a stand-in that needs no GPU (it lets
  the graph be built and checked on a CPU, and keeps NumPy-chunked arrays usable).

``signal_correlate`` / ``signal_convolve`` are ``cupyconv.signal.correlate`` / ``convolve`` (SciPy's
modes) of a dask ``in1`` with a small concrete ``in2``: ``in1`` is zero-padded as the mode needs and
each chunk is computed in 'valid' mode with a right halo, one task per chunk as for the filters
(:func:`_map_windows`).  NumPy chunks run ``scipy.signal``.

``conv`` maps ``cupyconv.conv`` over chunks of the batch axis where the spatial axes are single
chunks; spatially chunked inputs go through the same padded 'valid' windows as the signal functions
(chunk boundaries on multiples of the stride).  ``conv_transpose`` and ``separable_conv`` map over
batch chunks.  Weights are one key of the graph (a distributed scheduler sends them to each worker
once) and each worker copies them to a device once (:func:`_for_block`).  NumPy chunks run the
float64 ``cupyconv.reference`` functions, cast back to the input's dtype.  The backend of every
chunk is picked in one place, :func:`_backend`.

``gpu=True`` (every function): NumPy chunks are copied, with their halo, to the current GPU, run
there and copied back (:func:`_staged`) -- the out-of-core path for volumes in host memory or on
disk: each chunk is assembled with its halo on the host, so only the chunks in flight occupy the
GPU.

On a distributed cluster of two or more workers (its client the default scheduler when the
graph is built) a filter task takes its halo from its neighbours' face slabs, which each chunk
exports in one more task, so workers exchange slabs instead of whole chunks.  Where the input's
chunks are held by the cluster (persisted), the graph knows where each lives: a task reads whole
chunks from neighbours on its own worker and slabs from the others only, and runs where its
chunk is (:func:`halo_transfer`; the dask config key ``cupyconv.halo-transfer`` overrides the
choice).  :func:`distribute` persists an array in one box of neighbouring chunks per worker
(:func:`block_owners`), so only the slabs on the boxes' faces move.

``output`` may be None or a dtype (output arrays cannot be written chunk by chunk).  Tested: one
GPU with the synchronous and threaded schedulers, ``dask_cuda.LocalCUDACluster`` with one worker
on one GPU and one worker per GPU on two (placed and unplaced), a CPU ``distributed.LocalCluster``
of two workers (placement), and ``gpu=True`` on a memmap eight times CuPy's pool limit.
"""

from __future__ import annotations

import functools
import itertools
import operator
import threading
from collections import OrderedDict

import numpy as np

from cupyconv import ndimage as _nd
from cupyconv._ndimage.boundary import mode_code
from cupyconv._ndimage.dtypes import default_output_dtype

__all__ = ["correlate", "convolve", "correlate1d", "convolve1d", "gaussian_filter",
           "gaussian_filter1d", "uniform_filter", "uniform_filter1d", "sobel", "prewitt",
           "laplace", "gaussian_laplace", "gaussian_gradient_magnitude", "signal_correlate",
           "signal_convolve", "conv", "conv_transpose", "separable_conv", "filter_reach",
           "rechunk_for_depth", "window_chunks", "distribute", "block_owners", "chunk_owners",
           "halo_transfer"]

_WRAP_MODES = ("wrap", "grid-wrap")


# --------------------------------------------------------------------------- dask and backends
def _dask_array():
    try:
        import dask.array as da
    except ImportError as exc:  # the optional extra is missing
        raise ImportError("cupyconv.dask needs Dask: pip install 'cupyconv[dask]' "
                          "(or pip install 'dask[array]')") from exc
    return da


def _require_dask(x, name: str = "input"):
    da = _dask_array()
    if not isinstance(x, da.Array):
        raise TypeError(f"{name} must be a dask.array.Array, got {type(x).__name__}; wrap it with "
                        f"dask.array.from_array({name}, chunks=...) or call cupyconv.ndimage on "
                        f"the whole array")
    return x


def _is_cupy(block) -> bool:
    return hasattr(block, "__cuda_array_interface__")


# Per family of functions, the module a chunk runs: (for CuPy chunks, for NumPy chunks).  The
# NumPy stand-ins take the same names and arguments (cupyconv.reference computes in float64).
_BACKENDS = {"ndimage": ("cupyconv.ndimage", "scipy.ndimage"),
             "signal": ("cupyconv.signal", "scipy.signal"),
             "conv": ("cupyconv", "cupyconv.reference")}


def _backend(block, family: str = "ndimage"):
    """The module that runs one chunk -- the one place the chunk's array type picks the backend:
    ``cupyconv.ndimage`` / ``cupyconv.signal`` / ``cupyconv`` for CuPy chunks, ``scipy.ndimage`` /
    ``scipy.signal`` / ``cupyconv.reference`` (same names and signatures) for NumPy chunks."""
    import importlib

    return importlib.import_module(_BACKENDS[family][0 if _is_cupy(block) else 1])


def _staged(block_fn, gpu):
    """``block_fn`` as the chunk function of a map: with ``gpu`` true, a NumPy chunk (with its
    halo) is copied to the current GPU, ``block_fn`` runs there and its result is copied back;
    otherwise (and for CuPy chunks) ``block_fn`` runs on the chunk as it is.  A partial of a
    module-level function, so the graph pickles and tokenizes by value."""
    if gpu is None or gpu is False:
        return block_fn
    if gpu is not True:
        raise TypeError(f"gpu must be None, False or True, got {gpu!r}")
    return functools.partial(_on_gpu, block_fn)


def _on_gpu(block_fn, block, *args, **kwargs):
    """``block_fn`` on a CuPy copy of a NumPy ``block``, its result copied back (CuPy blocks run
    as they are)."""
    if _is_cupy(block):
        return block_fn(block, *args, **kwargs)
    import cupy

    return cupy.asnumpy(block_fn(cupy.asarray(block), *args, **kwargs))


# --------------------------------------------------------------------------- halo arithmetic
def filter_reach(size: int, origin: int = 0) -> tuple[int, int]:
    """(left, right): how many elements before and after an output a ``size``-tap correlation
    with ``origin`` reads (SciPy's window: ``size // 2 + origin`` taps before the centre)."""
    size, origin = operator.index(size), operator.index(origin)
    left = size // 2 + origin
    return left, size - 1 - left


def rechunk_for_depth(chunks: tuple[int, ...], depth: int) -> tuple[int, ...]:
    """Chunk sizes along one axis with every chunk at least ``depth`` thick (a halo can only come
    from the next chunk), merging thin chunks into their neighbours; unchanged where already so.
    An axis shorter than ``depth`` becomes one chunk."""
    chunks = tuple(int(c) for c in chunks)
    if depth <= 0 or len(chunks) <= 1 or min(chunks) >= depth:
        return chunks
    merged: list[int] = []
    run = 0
    for c in chunks:
        run += c
        if run >= depth:
            merged.append(run)
            run = 0
    if run:  # a thin remainder joins the last chunk
        if merged:
            merged[-1] += run
        else:
            merged.append(run)
    return tuple(merged)


def _boundary(modes: set) -> str | None:
    """dask's boundary for an axis filtered with ``modes``: periodic for wrap, none otherwise,
    None where both occur (the axis must then be one chunk)."""
    wrap = {m in _WRAP_MODES for m in modes}
    if wrap == {True, False}:
        return None
    return "periodic" if wrap == {True} else "none"


def _filter_block(block, name, args, kwargs):
    """The backend's ndimage filter ``name`` on one block (with its halo)."""
    return getattr(_backend(block), name)(block, *args, **kwargs)


def _map_filter(x, name: str, reaches: dict, modes: dict, out_dtype, args=(), kwargs=None,
                gpu=None):
    """Run the backend's ``name`` over ``x`` with per-axis halos ``reaches`` (axis -> (left,
    right) elements the filter reads before and after an output) and ``modes`` (axis -> set of
    mode names used along it), one task per output chunk (:func:`_halo_map`); ``gpu``: see
    :func:`_staged`."""
    from dask.array.utils import meta_from_array

    kwargs = dict(kwargs or {})
    kwargs["output"] = out_dtype
    reach, boundary, new_chunks = {}, {}, []
    for ax in range(x.ndim):
        left, right = (int(r) for r in reaches.get(ax, (0, 0)))
        depth = max(left, right)
        b = _boundary(modes.get(ax, {"reflect"})) if depth else "none"
        chunks = x.chunks[ax]
        if b is None:  # wrap and another mode along one axis: no single halo rule serves both
            chunks, b = (x.shape[ax],), "none"
        else:  # a halo comes from the next chunk alone, for either side it feeds
            chunks = rechunk_for_depth(chunks, depth)
        if len(chunks) == 1:  # the whole axis is in every chunk: the mode does the edge
            left = right = 0
        new_chunks.append(chunks)
        reach[ax], boundary[ax] = (left, right), b
    if tuple(new_chunks) != x.chunks:
        x = x.rechunk(tuple(new_chunks))
    filter_block = _staged(functools.partial(_filter_block, name=name, args=tuple(args),
                                             kwargs=kwargs), gpu)
    meta = meta_from_array(x, ndim=x.ndim, dtype=out_dtype)
    if not any(left or right for left, right in reach.values()):
        return x.map_blocks(filter_block, dtype=out_dtype, meta=meta)
    return _halo_map(x, reach, boundary, filter_block, out_dtype, meta, label=name)


# --------------------------------------------------------------------------- halo graph
# One task per output chunk: its arguments are the input chunks its halo reaches into (the chunk
# itself and, per axis with a halo, the neighbour on each side; corners where two halos meet)
# and static cutting plans; the task assembles the chunk with its halo in one allocation, runs
# the block function and trims.  map_overlap's graph (a getitem per slab, a concatenate per
# chunk, a trim per chunk: ~10 tasks per chunk in 3-d) gives the same result but costs more in
# the scheduler than the filters do on a GPU (benchmarks/notes/dask.md, "Issue 19").
def _axis_pieces(chunks: tuple, reach: tuple, boundary: str, edge_mode: bool = True) -> list:
    """Per chunk along one axis: ``(pieces, left, right)``, where ``pieces`` are the
    ``(neighbour index, start, stop)`` ranges its block with halo is made of, left to right, and
    ``left``/``right`` the halo present.  ``boundary`` "none": no halo beyond the array's edges;
    "periodic": the halo there comes from the far end of the axis.  An axis of one chunk gets no
    halo (with "periodic", the block function's own wrap mode does the edge).  With "none" and
    ``edge_mode``, the edge chunks' inward halo is at least the mirror image of the reach they
    lack outward: the block function's mode reflects the block's inside there, as it reflects
    the array's (``edge_mode=False``: 'valid' windows, which read no mode)."""
    left, right = reach
    n = len(chunks)
    periodic = boundary == "periodic"
    out = []
    for i, size in enumerate(chunks):
        want_lo, want_hi = left, right
        if edge_mode and not periodic:
            # at an edge the mode extends the chunk by reflecting its inside: an edge output
            # reaching ``left`` beyond the start reads up to element ``left`` (mirror), so the
            # block must hold that much even where the filter reaches less to the right
            if i == 0:
                want_hi = max(right, left + 1 - size)
            if i == n - 1:
                want_lo = max(left, right + 1 - size)
        pieces, lo, hi = [], 0, 0
        if want_lo and n > 1 and (i > 0 or periodic):
            j = (i - 1) % n
            pieces.append((j, chunks[j] - want_lo, chunks[j]))
            lo = want_lo
        pieces.append((i, 0, size))
        if want_hi and n > 1 and (i < n - 1 or periodic):
            j = (i + 1) % n
            pieces.append((j, 0, want_hi))
            hi = want_hi
        if any(start < 0 or stop > chunks[j] for j, start, stop in pieces):
            raise ValueError(f"chunk {i} of {chunks} cannot take a halo of {reach} from its "
                             f"neighbours: merge thin chunks first (rechunk_for_depth)")
        out.append((tuple(pieces), lo, hi))
    return out


def _placed_pieces(index: tuple, axes: list):
    """Per axis, the pieces of chunk ``index``'s block: ``(neighbour index, side, source slice,
    destination slice)``, side -1 for the left neighbour's piece, 0 the chunk's own, +1 the
    right neighbour's; and the (left, right) halo present per axis."""
    per_axis = [axes[ax][i] for ax, i in enumerate(index)]
    placed = []
    for pieces, lo, _ in per_axis:
        at, row = 0, []
        for n, (j, start, stop) in enumerate(pieces):  # [left,] own[, right]
            side = n - (1 if lo else 0)
            row.append((j, side, slice(start, stop), slice(at, at + stop - start)))
            at += stop - start
        placed.append(row)
    return placed, tuple((lo, hi) for _, lo, hi in per_axis)


def _block_plan(index: tuple, axes: list, chunks: tuple, remote):
    """The cutting plan of chunk ``index``'s block: ``(sources, cuts, shape, present)``.

    ``sources``: what the block is read from, the chunk itself first, each ``(neighbour index,
    None)`` for a whole chunk or ``(neighbour index, (axis, side, thickness))`` for a slab that
    neighbour exports (:func:`_export_slabs`).  A neighbour's piece comes from its slab where
    ``remote(neighbour index)`` is true (it lives on another worker), from the slab at the first
    axis on which it is a neighbour (a corner piece lies in the face slab of either axis), and
    from its whole chunk otherwise.  ``cuts`` = ``(source number, source bounds, destination
    bounds)`` per piece, bounds ``((start, stop), ...)`` per axis, the source's relative to it
    (ints, not slices: the client pickles every slice of a graph through distributed's reducer
    hook, ~1 ms per 300 of them, and a 3-d block of 27 pieces holds 162); ``shape`` the padded
    block's shape; ``present`` the (left, right) halo per axis."""
    placed, present = _placed_pieces(index, axes)
    sources: dict = {(tuple(index), None): 0}
    cuts = []
    for combo in itertools.product(*placed):
        which = tuple(j for j, _, _, _ in combo)
        srcs = [src for _, _, src, _ in combo]
        dsts = tuple(dst for _, _, _, dst in combo)
        off = next((ax for ax, (_, side, _, _) in enumerate(combo) if side), None)
        slab = None
        if off is not None and remote(which):
            j, side, src, _ = combo[off]
            size = chunks[off][j]
            # the left neighbour gives its high end, the right one its low end: either way the
            # piece is the whole slab along this axis
            thick = size - src.start if side < 0 else src.stop
            srcs[off] = slice(0, thick)
            slab = (off, side, thick)
        number = sources.setdefault((which, slab), len(sources))
        cuts.append((number, tuple((c.start, c.stop) for c in srcs),
                     tuple((c.start, c.stop) for c in dsts)))
    shape = tuple(row[-1][3].stop for row in placed)
    return tuple(sources), tuple(cuts), shape, present


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


def assemble_halo(pieces, cuts, shape):
    """A chunk with its halo in one new array of ``shape``: ``cuts`` holds, per piece, ``(number
    of the input in pieces, source bounds, destination bounds)``, bounds ``((start, stop), ...)``
    per axis (:func:`_block_plan`).  The array type is the pieces' (CuPy for CuPy chunks, NumPy
    otherwise).  A block without halo is the chunk itself (no copy).  (The one place a block is
    assembled: a one-launch gather kernel can replace it.)"""
    first = pieces[0]
    if len(cuts) == 1 and tuple(first.shape) == tuple(shape):
        return first
    if _is_cupy(first):
        import cupy as xp
    else:
        xp = np
    block = xp.empty(shape, dtype=first.dtype)
    for number, src, dst in cuts:
        block[tuple(slice(*b) for b in dst)] = pieces[number][tuple(slice(*b) for b in src)]
    return block


# A trimmed result stays a view of the block's result where that holds at most this much more
# memory than the chunk, and is copied where it holds more (small chunks, wide halos).  The copy
# costs one more read and write of the chunk: 0.4 ms of the ~3 ms a 512^3 float32 chunk of the
# streamed gaussian takes on an H100 (benchmarks/notes/dask.md, "Session 17").
TRIM_VIEW_MAX_GROWTH = 1.25


def _halo_task(block_fn, cuts, shape, interior, *pieces, **kwargs):
    """One output chunk: its block assembled from ``pieces``, ``block_fn`` on it, and the halo
    trimmed off (``interior``: slices, or None to keep the whole result): a view of the result
    where the halo adds at most TRIM_VIEW_MAX_GROWTH of memory, else a copy that does not pin
    the padded block."""
    result = block_fn(assemble_halo(pieces, cuts, shape), **kwargs)
    if interior is None:
        return result
    trimmed = result[interior]
    if result.size <= TRIM_VIEW_MAX_GROWTH * trimmed.size:
        return trimmed
    return trimmed.copy()


def _sourced_halo_task(block_fn, cuts, shape, interior, picks, *inputs, **kwargs):
    """:func:`_halo_task` with some pieces from neighbours' slab exports: ``picks`` names, per
    source of the plan (:func:`_block_plan`), its input (by position in ``inputs``) and, for an
    export, the slab's key in it (:func:`_export_slabs` or :func:`_export_bundle`; None: the
    input is a whole chunk)."""
    pieces = [inputs[i] if slab is None else inputs[i][slab] for i, slab in picks]
    return _halo_task(block_fn, cuts, shape, interior, *pieces, **kwargs)


# --------------------------------------------------------------------------- placement
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


# --------------------------------------------------------------------------- arguments
def _out_dtype(x, output, complex_output: bool) -> np.dtype:
    if output is None:
        return default_output_dtype(x.dtype.name, complex_output)
    if isinstance(output, (type, np.dtype, str)):
        dtype = np.dtype(output)
        return np.promote_types(dtype, np.complex64) if complex_output else dtype
    raise TypeError(f"output must be None or a dtype for dask arrays, got "
                    f"{type(output).__name__}: the result is a new dask array")


def _modes_along(mode, axes) -> dict:
    """axis -> {mode} for a scalar mode or one mode per axis of ``axes``."""
    items = _nd._sequence(mode, len(axes), "mode")
    for m in items:
        mode_code(m)
    return {ax: {m} for ax, m in zip(axes, items)}


def _single_mode(mode, axes) -> dict:
    if not isinstance(mode, str):
        raise RuntimeError("A sequence of modes is not supported")
    mode_code(mode)
    return {ax: {mode} for ax in axes}


# --------------------------------------------------------------------------- 1-d filters
def correlate1d(input, weights, axis=-1, output=None, mode="reflect", cval=0.0, origin=0, *,
                gpu=None):
    """:func:`cupyconv.ndimage.correlate1d` of a dask array."""
    x = _require_dask(input)
    w = _nd._host_weights_1d(weights)
    axis = _nd._axis(axis, x.ndim)
    origin = _nd._origin(origin, w.shape[0])
    out = _out_dtype(x, output, x.dtype.kind == "c" or w.dtype.kind == "c")
    return _map_filter(x, "correlate1d", {axis: filter_reach(w.shape[0], origin)},
                       _single_mode(mode, [axis]), out, (w,),
                       dict(axis=axis, mode=mode, cval=cval, origin=origin), gpu)


def convolve1d(input, weights, axis=-1, output=None, mode="reflect", cval=0.0, origin=0, *,
               gpu=None):
    """:func:`cupyconv.ndimage.convolve1d` of a dask array."""
    x = _require_dask(input)
    w = _nd._host_weights_1d(weights)
    axis = _nd._axis(axis, x.ndim)
    origin = _nd._origin(origin, w.shape[0])  # valid exactly when the mirrored one is
    # convolution is correlation with the reversed weights and the mirrored origin
    mirrored = -origin - (1 - w.shape[0] % 2)
    out = _out_dtype(x, output, x.dtype.kind == "c" or w.dtype.kind == "c")
    return _map_filter(x, "convolve1d", {axis: filter_reach(w.shape[0], mirrored)},
                       _single_mode(mode, [axis]), out, (w,),
                       dict(axis=axis, mode=mode, cval=cval, origin=origin), gpu)


def _gaussian_reach(sigma, truncate, radius) -> tuple[int, int]:
    r = _nd._gaussian_radius(float(sigma), truncate, radius)
    return r, r


def gaussian_filter1d(input, sigma, axis=-1, order=0, output=None, mode="reflect", cval=0.0,
                      truncate=4.0, *, radius=None, gpu=None):
    """:func:`cupyconv.ndimage.gaussian_filter1d` of a dask array."""
    x = _require_dask(input)
    axis = _nd._axis(axis, x.ndim)
    out = _out_dtype(x, output, False)
    return _map_filter(x, "gaussian_filter1d", {axis: _gaussian_reach(sigma, truncate, radius)},
                       _single_mode(mode, [axis]), out, (sigma,),
                       dict(axis=axis, order=order, mode=mode, cval=cval, truncate=truncate,
                            radius=radius), gpu)


def _uniform_reach(size, origin) -> tuple[int, int]:
    size, origin = operator.index(size), operator.index(origin)
    if size < 1:
        raise RuntimeError(f"incorrect filter size {size}: size must be at least 1")
    if size // 2 + origin < 0 or size // 2 + origin >= size:
        raise ValueError(f"invalid origin {origin} for a uniform filter of size {size}")
    return filter_reach(size, origin)


def uniform_filter1d(input, size, axis=-1, output=None, mode="reflect", cval=0.0, origin=0, *,
                     gpu=None):
    """:func:`cupyconv.ndimage.uniform_filter1d` of a dask array."""
    x = _require_dask(input)
    axis = _nd._axis(axis, x.ndim)
    out = _out_dtype(x, output, x.dtype.kind == "c")
    return _map_filter(x, "uniform_filter1d", {axis: _uniform_reach(size, origin)},
                       _single_mode(mode, [axis]), out, (size,),
                       dict(axis=axis, mode=mode, cval=cval, origin=origin), gpu)


# --------------------------------------------------------------------------- N-d filters
def _correlate_nd(name, input, weights, output, mode, cval, origin, convolution, axes, gpu):
    x = _require_dask(input)
    w = _nd._host_weights(weights)
    axes_t = _nd._axes(axes, x.ndim)
    # the correlation each chunk runs: weights and origins per dim (convolution: reversed and
    # mirrored), as cupyconv.ndimage pairs them with the dims
    wd, origins = _nd._nd_weights(x.ndim, w, origin, axes, convolution)
    reaches = {ax: filter_reach(size, operator.index(o))
               for ax, (size, o) in enumerate(zip(wd.shape, origins)) if wd.size}
    out = _out_dtype(x, output, x.dtype.kind == "c" or w.dtype.kind == "c")
    return _map_filter(x, name, reaches, _single_mode(mode, axes_t), out, (w,),
                       dict(mode=mode, cval=cval, origin=origin, axes=axes), gpu)


def correlate(input, weights, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None,
              gpu=None):
    """:func:`cupyconv.ndimage.correlate` of a dask array."""
    return _correlate_nd("correlate", input, weights, output, mode, cval, origin, False, axes,
                         gpu)


def convolve(input, weights, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None,
             gpu=None):
    """:func:`cupyconv.ndimage.convolve` of a dask array."""
    return _correlate_nd("convolve", input, weights, output, mode, cval, origin, True, axes,
                         gpu)


def gaussian_filter(input, sigma, order=0, output=None, mode="reflect", cval=0.0, truncate=4.0,
                    *, radius=None, axes=None, gpu=None):
    """:func:`cupyconv.ndimage.gaussian_filter` of a dask array."""
    x = _require_dask(input)
    axes_t = _nd._axes(axes, x.ndim)
    n = len(axes_t)
    sigmas, radii = _nd._sequence(sigma, n, "sigma"), _nd._sequence(radius, n, "radius")
    reaches = {ax: _gaussian_reach(s, truncate, r) for ax, s, r in zip(axes_t, sigmas, radii)
              if s > 1e-15}  # as the filter: smaller sigmas are skipped
    out = _out_dtype(x, output, False)
    return _map_filter(x, "gaussian_filter", reaches, _modes_along(mode, axes_t), out, (sigma,),
                       dict(order=order, mode=mode, cval=cval, truncate=truncate, radius=radius,
                            axes=axes), gpu)


def uniform_filter(input, size=3, output=None, mode="reflect", cval=0.0, origin=0, *, axes=None,
                   gpu=None):
    """:func:`cupyconv.ndimage.uniform_filter` of a dask array."""
    x = _require_dask(input)
    axes_t = _nd._axes(axes, x.ndim)
    # the passes cupyconv.ndimage runs (sizes above 1, truncated to integers, as SciPy)
    reaches = {ax: _uniform_reach(s, o)
               for ax, s, o, _ in _nd.uniform_axes(size, origin, mode, axes, x.ndim)}
    out = _out_dtype(x, output, x.dtype.kind == "c")
    return _map_filter(x, "uniform_filter", reaches, _modes_along(mode, axes_t), out, (size,),
                       dict(mode=mode, cval=cval, origin=origin, axes=axes), gpu)


def _edge_filter(name, input, axis, output, mode, cval, gpu):
    x = _require_dask(input)
    _nd._axis(axis, x.ndim)
    out = _out_dtype(x, output, x.dtype.kind == "c")
    every = tuple(range(x.ndim))  # 3 taps along the axis, 3 smoothing taps along every other
    return _map_filter(x, name, {ax: (1, 1) for ax in every}, _modes_along(mode, every), out, (),
                       dict(axis=axis, mode=mode, cval=cval), gpu)


def sobel(input, axis=-1, output=None, mode="reflect", cval=0.0, *, gpu=None):
    """:func:`cupyconv.ndimage.sobel` of a dask array."""
    return _edge_filter("sobel", input, axis, output, mode, cval, gpu)


def prewitt(input, axis=-1, output=None, mode="reflect", cval=0.0, *, gpu=None):
    """:func:`cupyconv.ndimage.prewitt` of a dask array."""
    return _edge_filter("prewitt", input, axis, output, mode, cval, gpu)


def laplace(input, output=None, mode="reflect", cval=0.0, *, axes=None, gpu=None):
    """:func:`cupyconv.ndimage.laplace` of a dask array."""
    x = _require_dask(input)
    axes_t = _nd._axes(axes, x.ndim)
    out = _out_dtype(x, output, False)
    return _map_filter(x, "laplace", {ax: (1, 1) for ax in axes_t}, _modes_along(mode, axes_t), out,
                       (), dict(mode=mode, cval=cval, axes=axes), gpu)


def _gaussian_derivative(name, input, sigma, output, mode, cval, axes, gpu, kwargs):
    x = _require_dask(input)
    axes_t = _nd._axes(axes, x.ndim)
    unknown = set(kwargs) - {"truncate", "radius"}
    if unknown:
        raise TypeError(f"unexpected keyword arguments {sorted(unknown)}")
    # every term runs the Gaussian over every dim with these sigmas (0: that dim is not filtered)
    full = _nd.gaussian_term_sigmas(name, sigma, axes_t, x.ndim)
    radii = _nd._sequence(kwargs.get("radius"), x.ndim, "radius")
    truncate = kwargs.get("truncate", 4.0)
    reaches = {ax: _gaussian_reach(full[ax], truncate, radii[ax]) for ax in range(x.ndim)
              if full[ax] > 1e-15}
    # the term of each axis runs the Gaussian along every axis with that axis's mode
    used = {m for ms in _modes_along(mode, axes_t).values() for m in ms}
    out = _out_dtype(x, output, False)
    return _map_filter(x, name, reaches, {ax: used for ax in range(x.ndim)}, out, (sigma,),
                       dict(mode=mode, cval=cval, axes=axes, **kwargs), gpu)


def gaussian_laplace(input, sigma, output=None, mode="reflect", cval=0.0, *, axes=None, gpu=None,
                     **kwargs):
    """:func:`cupyconv.ndimage.gaussian_laplace` of a dask array."""
    return _gaussian_derivative("gaussian_laplace", input, sigma, output, mode, cval, axes, gpu,
                                kwargs)


def gaussian_gradient_magnitude(input, sigma, output=None, mode="reflect", cval=0.0, *, axes=None,
                                gpu=None, **kwargs):
    """:func:`cupyconv.ndimage.gaussian_gradient_magnitude` of a dask array."""
    return _gaussian_derivative("gaussian_gradient_magnitude", input, sigma, output, mode, cval,
                                axes, gpu, kwargs)


# --------------------------------------------------------------------------- sliding windows
def window_chunks(chunks, extent: int, stride: int = 1) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(input chunks, output chunks) along one zero-padded axis for a 'valid' window of
    ``extent + 1`` elements moved by ``stride``: output ``o`` reads inputs ``o * stride`` to
    ``o * stride + extent``.

    Every input chunk starts on a multiple of the stride (so a chunk's first output is its first
    element) and is at least ``extent + 1`` thick (its halo then comes from its right neighbour
    alone, and the last chunk has at least one output); chunk boundaries move down to the stride
    and thin chunks merge.  A chunk other than the last gives ``size // stride`` outputs, the last
    ``(size - extent - 1) // stride + 1``."""
    extent, stride = operator.index(extent), operator.index(stride)
    length = sum(int(c) for c in chunks)
    if length < extent + 1:
        raise ValueError(f"the axis ({length} elements after padding) is shorter than the window "
                         f"({extent + 1} elements)")
    starts, edge = set(), 0
    for c in chunks[:-1]:
        edge += int(c)
        starts.add(stride * (edge // stride))
    bounds = sorted(starts - {0}) + [length]
    sizes = tuple(b - a for a, b in zip([0] + bounds[:-1], bounds))
    sizes = rechunk_for_depth(sizes, extent + 1)
    outs = tuple(c // stride for c in sizes[:-1]) + ((sizes[-1] - extent - 1) // stride + 1,)
    return sizes, outs


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


def _contiguous_block(block_fn, block, **kwargs):
    """``block_fn`` on a C-contiguous ``block``: a block may be a zero-strided view (a pad chunk
    thicker than the window, left alone by the rechunk); the kernels take C-contiguous arrays."""
    if _is_cupy(block):
        import cupy

        return block_fn(cupy.ascontiguousarray(block), **kwargs)
    return block_fn(np.ascontiguousarray(block), **kwargs)


# --------------------------------------------------------------------------- scipy.signal
def _signal_filter(func, in1, in2, mode, method, gpu):
    x = _require_dask(in1, "in1")
    da = _dask_array()
    if isinstance(in2, da.Array):
        raise TypeError("in2 must be a concrete (NumPy or CuPy) array, not a dask array: call "
                        ".compute() on it first (it is embedded once in the graph)")
    w = in2.get() if _is_cupy(in2) else np.asarray(in2)
    if mode not in ("full", "same", "valid"):
        raise ValueError(f"mode must be 'full', 'same' or 'valid', got {mode!r}")
    if method not in ("auto", "direct", "fft"):
        raise ValueError(f"method must be 'auto', 'direct' or 'fft', got {method!r}")
    if w.ndim != x.ndim:
        raise ValueError(f"in1 and in2 should have the same dimensionality, got in1.ndim "
                         f"{x.ndim} and in2.ndim {w.ndim}")
    if 0 in x.shape or 0 in w.shape:
        raise ValueError(f"in1 and in2 must not be empty, got shapes {x.shape} and {w.shape}")
    if mode == "valid" and any(k > n for n, k in zip(x.shape, w.shape)):
        # SciPy would swap the operands; the small in2 cannot take the dask array's place
        raise ValueError(f"in1 (the dask array) must be at least as large as in2 in every "
                         f"dimension for 'valid' mode, got shapes {x.shape} and {w.shape}")
    windows = {}
    for ax, k in enumerate(w.shape):
        # zeros around in1 so that every output is a 'valid' window of the padded array:
        # 'full' pads k - 1 on each side; 'same' keeps the centred part of 'full', which starts
        # (k - 1) // 2 into it (SciPy's centring, also for even k); 'valid' pads nothing
        start = {"full": 0, "same": (k - 1) // 2, "valid": k - 1}[mode]
        windows[ax] = (k - 1 - start, start if mode == "same" else k - 1 - start, k - 1, 1)
    dtype = np.result_type(x.dtype, w.dtype)

    return _map_windows(x, windows, {}, functools.partial(_signal_block, func=func, method=method),
                        dtype, gpu, weights=_shared((w,)))


def _signal_block(block, weights, func, method):
    """``scipy.signal``'s ``func`` (the backend's) in 'valid' mode on one block."""
    return getattr(_backend(block, "signal"), func)(block, *_for_block(weights, block),
                                                    mode="valid", method=method)


def signal_correlate(in1, in2, mode="full", method="auto", *, gpu=None):
    """:func:`cupyconv.signal.correlate` (``scipy.signal.correlate`` semantics) of a dask array
    ``in1`` with a small concrete (NumPy or CuPy) ``in2`` of the same number of dims.

    Named ``signal_*`` because :func:`correlate` here is ``ndimage.correlate``.  Each chunk is
    correlated in 'valid' mode with a halo of ``in2.shape - 1`` from its right neighbours after
    ``in1`` is zero-padded as the mode needs ('full': ``k - 1`` on each side; 'same': SciPy's
    centring, ``k - 1 - (k - 1) // 2`` before and ``(k - 1) // 2`` after); CuPy chunks run
    ``cupyconv.signal.correlate``, NumPy chunks ``scipy.signal.correlate`` (``method`` is passed
    to both; with 'auto' a chunk may take another method than the whole array, so results agree
    to rounding).  In 'valid' mode ``in1`` must be the larger operand in every dim.
    """
    return _signal_filter("correlate", in1, in2, mode, method, gpu)


def signal_convolve(in1, in2, mode="full", method="auto", *, gpu=None):
    """:func:`cupyconv.signal.convolve` (``scipy.signal.convolve`` semantics) of a dask array
    ``in1`` with a small concrete ``in2``; chunking as in :func:`signal_correlate` (convolution
    reads the same window of ``in1`` as correlation, with the kernel reversed)."""
    return _signal_filter("convolve", in1, in2, mode, method, gpu)


# --------------------------------------------------------------------------- convolution
# Weights and biases travel as one graph key (_shared): a distributed scheduler sends them to
# each worker once, not with every task.  Each worker then keeps one device copy per device
# (_for_block), made by its first CuPy block and reused by later ones.  The cache holds the host
# tuple it was made from, so the id in its key cannot be reused while the entry lives.
_COPIES_MAX = 16
_copies: OrderedDict = OrderedDict()   # (id(arrays), device id) -> (arrays, device copies)
_copies_lock = threading.Lock()


def _shared(arrays: tuple):
    """``arrays`` (weights and biases, None allowed) as one dask key, a task argument."""
    import dask

    return dask.delayed(arrays, pure=True, traverse=False)


def _for_block(arrays: tuple, block) -> tuple:
    """``arrays`` in the block's array type: host arrays for a NumPy block; for a CuPy block,
    CuPy arrays on the block's device, copied once per device and reused."""
    if not _is_cupy(block):
        return tuple(_host(a) for a in arrays)
    import cupy

    key = (id(arrays), block.device.id)
    with _copies_lock:
        hit = _copies.get(key)
        if hit is not None:
            _copies.move_to_end(key)
            return hit[1]
    with block.device:
        copies = tuple(None if a is None else cupy.asarray(a) for a in arrays)
    with _copies_lock:
        _copies[key] = (arrays, copies)
        while len(_copies) > _COPIES_MAX:
            _copies.popitem(last=False)
    return copies


def _host(a):
    return None if a is None else (a.get() if _is_cupy(a) else np.asarray(a))


# options of the GPU functions that choose how, not what (the float64 reference has none)
_GPU_ONLY_OPTIONS = ("method", "precision")


def _conv_block(block, op, weights, options):
    """One chunk through ``cupyconv.<op>`` (CuPy) or the float64 ``cupyconv.reference.<op>``
    (NumPy, cast back to the chunk's dtype); ``weights``: the positional weight/bias arguments."""
    backend = _backend(block, "conv")
    if _is_cupy(block):
        return getattr(backend, op)(block, *_for_block(weights, block), **options)
    options = {k: v for k, v in options.items() if k not in _GPU_ONLY_OPTIONS}
    y = getattr(backend, op)(block, *_for_block(weights, block), **options)
    return y.astype(block.dtype, copy=False)


def _concrete_weights(x, weights: dict, what):
    da = _dask_array()
    for name, a in weights.items():
        if isinstance(a, da.Array):
            raise TypeError(f"{name} must be a concrete (NumPy or CuPy) array, not a dask array: "
                            f"call .compute() on it first")
    w = next(iter(weights.values()))
    if len(getattr(w, "shape", ())) != x.ndim:
        raise ValueError(f"x must be batched for {what}, (N, C, *spatial) or (N, *spatial, C): "
                         f"x.ndim ({x.ndim}) must equal w.ndim ({len(getattr(w, 'shape', ()))})")


def _map_batch(x, op: str, weights: tuple, options: dict, tail: tuple, gpu=None):
    """``cupyconv.<op>`` over the chunks of the batch axis (the other axes made one chunk);
    ``tail``: the output's shape after the batch axis."""
    from dask.array.utils import meta_from_array

    if any(len(c) > 1 for c in x.chunks[1:]):
        x = x.rechunk((x.chunks[0],) + tuple((s,) for s in x.shape[1:]))
    return x.map_blocks(_staged(_conv_block, gpu), op=op, weights=_shared(weights),
                        options=options,
                        chunks=(x.chunks[0],) + tuple((int(s),) for s in tail), dtype=x.dtype,
                        meta=meta_from_array(x, ndim=x.ndim, dtype=x.dtype))


def conv(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1, layout="NCHW", gpu=None,
         **kwargs):
    """:func:`cupyconv.conv` of a dask array ``x`` of shape ``(N, C, *spatial)`` (or channels-last).

    ``w`` (and ``bias``) are concrete arrays, NumPy or CuPy, held once in the graph (one key, sent
    to each worker once; each worker copies them to a device once).  Chunks along the channel axis
    are merged.  Where the spatial axes are single chunks, each batch chunk is convolved whole
    (``map_blocks``).  Where a spatial axis is chunked (one very large image), ``x`` is
    zero-padded by ``padding`` first (``da.pad``) and each chunk is convolved without padding,
    with a halo of ``dilation * (kernel - 1)`` from its right neighbour (one task per chunk); with
    ``stride`` > 1 the chunk boundaries are moved onto multiples of the stride
    (:func:`window_chunks`).  ``kwargs`` (e.g. ``method``, ``activation``) pass to
    :func:`cupyconv.conv`.  Returns a dask array of the input's dtype.
    """
    from cupyconv._core.geometry import ConvGeometry

    x = _require_dask(x, "x")
    _concrete_weights(x, {"w": w, "bias": bias}, "conv")
    if "z" in kwargs:
        raise TypeError("z (a residual) is not supported on dask arrays: add it to the result")
    geometry = dict(stride=stride, padding=padding, dilation=dilation, groups=groups,
                    layout=layout)
    geom = ConvGeometry.from_shapes(x.shape, tuple(w.shape), **geometry)  # validates first
    out_shape = geom.output_shape
    channels_last = geom.layout == "NHWC"
    channel_axis = x.ndim - 1 if channels_last else 1
    spatial_axes = tuple(range(1, x.ndim - 1)) if channels_last else tuple(range(2, x.ndim))
    if all(len(x.chunks[ax]) == 1 for ax in spatial_axes):
        return _map_batch(x, "conv", (w, bias), dict(geometry, **kwargs), out_shape[1:], gpu)
    # spatially chunked: padding moves into the graph, each chunk runs unpadded
    windows = {ax: (lo, hi, d * (k - 1), s) for ax, lo, hi, k, s, d in
               zip(spatial_axes, geom.pad_lo, geom.pad_hi, geom.kernel, geom.stride,
                   geom.dilation)}
    options = dict(stride=geom.stride, padding=0, dilation=geom.dilation, groups=groups,
                   layout=layout, **kwargs)
    y = _map_windows(x, windows, {channel_axis: out_shape[channel_axis]}, _conv_block, x.dtype,
                     gpu, op="conv", weights=_shared((w, bias)), options=options)
    assert y.shape == tuple(out_shape), (y.shape, out_shape)  # window_chunks tiles the output
    return y


def conv_transpose(x, w, bias=None, *, stride=1, padding=0, output_padding=0, dilation=1,
                   groups=1, layout="NCHW", gpu=None, **kwargs):
    """:func:`cupyconv.conv_transpose` of a dask array ``x`` of shape ``(N, C_in, *spatial)`` (or
    channels-last), chunk by chunk along the batch axis (channel and spatial chunks are merged).

    ``w``/``bias`` are concrete arrays as in :func:`conv`; ``kwargs`` (e.g. ``method``) pass to
    :func:`cupyconv.conv_transpose`.  NumPy chunks run the float64
    ``cupyconv.reference.conv_transpose``, cast back to the input's dtype.  Returns a dask array
    of the input's dtype.
    """
    from cupyconv._core.geometry import (normalize_layout, normalize_output_padding,
                                         normalize_padding, per_dim, transpose_output_spatial)

    x = _require_dask(x, "x")
    _concrete_weights(x, {"w": w, "bias": bias}, "conv_transpose")
    if isinstance(padding, str):
        raise ValueError(f"conv_transpose padding must be an int, a per-dim tuple or per-dim "
                         f"(lo, hi) pairs, got {padding!r}")
    layout = normalize_layout(layout)
    channels_last = layout == "NHWC"
    in_spatial = tuple(x.shape[1:-1]) if channels_last else tuple(x.shape[2:])
    kernel = tuple(w.shape[1:-1]) if channels_last else tuple(w.shape[2:])
    nsp = len(in_spatial)
    if not 1 <= nsp <= 3:
        raise ValueError(f"x must have 1-3 spatial dims, got shape {x.shape}")
    stride_t = per_dim(stride, nsp, "stride", 1)
    dilation_t = per_dim(dilation, nsp, "dilation", 1)
    pad_lo, pad_hi = normalize_padding(padding, in_spatial, kernel, stride_t, dilation_t)
    op = normalize_output_padding(output_padding, stride_t, dilation_t)
    out_spatial = transpose_output_spatial(in_spatial, kernel, stride_t, dilation_t, pad_lo,
                                           pad_hi, op)
    if min(out_spatial) < 1:
        raise ValueError(f"conv_transpose output would be empty: spatial size {out_spatial} for "
                         f"input {in_spatial}, kernel {kernel}, padding lo {pad_lo} hi {pad_hi}")
    groups_n = per_dim(groups, 1, "groups", 1)[0]
    c_out = (w.shape[-1] if channels_last else w.shape[1]) * groups_n
    if (x.shape[-1] if channels_last else x.shape[1]) != w.shape[0]:
        raise ValueError(f"x has {x.shape[-1] if channels_last else x.shape[1]} channels but w "
                         f"(C_in, ...) expects {w.shape[0]}: x {x.shape}, w {tuple(w.shape)}")
    tail = out_spatial + (c_out,) if channels_last else (c_out,) + out_spatial
    options = dict(stride=stride, padding=padding, output_padding=output_padding,
                   dilation=dilation, groups=groups, layout=layout, **kwargs)
    return _map_batch(x, "conv_transpose", (w, bias), options, tail, gpu)


def separable_conv(x, w_dw, w_pw, bias_dw=None, bias_pw=None, *, stride=1, padding=0,
                   dilation=1, activation=None, layout="NCHW", gpu=None, **kwargs):
    """:func:`cupyconv.separable_conv` (depthwise, ``activation``, pointwise) of a dask array
    ``x`` of shape ``(N, C, *spatial)`` (or channels-last), chunk by chunk along the batch axis
    (channel and spatial chunks are merged).

    The weights and biases are concrete arrays held once in the graph, as in :func:`conv`;
    ``kwargs`` (``method``) pass to :func:`cupyconv.separable_conv`.  NumPy chunks run the
    float64 ``cupyconv.reference.separable_conv``, cast back to the input's dtype.  Returns a
    dask array of the input's dtype.
    """
    from cupyconv._depthwise.separable import ACTIVATIONS
    from cupyconv.separable import separable_geometry

    x = _require_dask(x, "x")
    _concrete_weights(x, {"w_dw": w_dw, "w_pw": w_pw, "bias_dw": bias_dw, "bias_pw": bias_pw},
                      "separable_conv")
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {tuple(ACTIVATIONS)}, got {activation!r}")
    dw, kp = separable_geometry(x.shape, w_dw.shape, w_pw.shape, stride=stride,
                                padding=padding, dilation=dilation, layout=layout)
    tail = dw.layout_shape(1, kp, dw.out_spatial)[1:]
    options = dict(stride=stride, padding=padding, dilation=dilation, activation=activation,
                   layout=layout, **kwargs)
    return _map_batch(x, "separable_conv", (w_dw, w_pw, bias_dw, bias_pw), options, tail, gpu)
