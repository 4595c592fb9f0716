"""Halo planning, pure arithmetic on chunk sizes (no Dask needed): how far a filter reaches
(:func:`filter_reach`), chunks thick enough to feed a halo (:func:`rechunk_for_depth`,
:func:`window_chunks`), the pieces each block is made of (:func:`_axis_pieces`), the cutting plan of
one block (:func:`_block_plan`), and the task that assembles a block, runs the chunk function on it
and trims the result (:func:`assemble_halo`, :func:`_halo_task`)."""

from __future__ import annotations

import itertools
import operator

import numpy as np

from cupyconv.dask.chunks import _is_cupy


# --------------------------------------------------------------------------- reaches
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


# --------------------------------------------------------------------------- pieces and cuts
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


# --------------------------------------------------------------------------- assembly
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
