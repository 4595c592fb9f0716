"""cupyconv.dask's halo planning on a CPU (``cupyconv/dask/halo.py``; no Dask needed): how far a
filter reaches, chunks merged until they can feed a halo, the 'valid' windows' chunks, the pieces
and cuts of every block, its assembly and the trimming of its result."""

import numpy as np
import pytest

import cupyconv.dask as cd
from cupyconv.dask import halo


# --------------------------------------------------------------------------- reaches
@pytest.mark.parametrize("size,origin,reach", [(1, 0, (0, 0)), (3, 0, (1, 1)), (4, 0, (2, 1)),
                                               (4, -2, (0, 3)), (4, 1, (3, 0)), (5, -2, (0, 4)),
                                               (7, 3, (6, 0)), (2, -1, (0, 1))])
def test_filter_reach(size, origin, reach):
    assert cd.filter_reach(size, origin) == reach
    assert sum(reach) == size - 1


@pytest.mark.parametrize("chunks,depth,expected", [
    ((4, 4, 4), 3, (4, 4, 4)),        # thick enough: unchanged
    ((4, 1, 4), 3, (4, 5)),           # a thin chunk joins the next
    ((1, 1, 1, 5), 2, (2, 6)),        # thin remainder joins the last chunk
    ((2, 2), 5, (4,)),                # shorter than the halo: one chunk
    ((7,), 9, (7,)),
    ((3, 3, 1), 3, (3, 4)),
    ((5, 0, 5), 2, (5, 5)),           # empty chunks vanish
    ((2, 2, 2), 0, (2, 2, 2)),
])
def test_rechunk_for_depth(chunks, depth, expected):
    got = cd.rechunk_for_depth(chunks, depth)
    assert got == expected and sum(got) == sum(chunks)
    assert len(got) == 1 or min(got) >= depth


def test_window_chunks():
    # stride 1: chunks kept where thick enough, thin ones merged
    assert cd.window_chunks((5, 5, 5), 2) == ((5, 5, 5), (5, 5, 3))
    assert cd.window_chunks((5, 1, 5), 2) == ((5, 6), (5, 4))
    # stride 3: boundaries move down onto multiples of 3 (5 -> 3, 10 -> 9)
    assert cd.window_chunks((5, 5, 5), 2, 3) == ((3, 6, 6), (1, 2, 2))
    # every chunk at least extent + 1 thick
    sizes, outs = cd.window_chunks((4, 4, 4, 4), 6, 2)
    assert min(sizes) >= 7 and sum(sizes) == 16 and sum(outs) == (16 - 7) // 2 + 1
    assert cd.window_chunks((3,), 0, 1) == ((3,), (3,))
    with pytest.raises(ValueError, match="shorter than the window"):
        cd.window_chunks((2, 1), 3)


# --------------------------------------------------------------------------- pieces, cuts and assembly
def _expected_block(a, starts, sizes, present, periodic):
    """The block of the chunk at ``starts`` with halo ``present`` cut straight from ``a``."""
    index = []
    for ax, (s, c, (lo, hi)) in enumerate(zip(starts, sizes, present)):
        i = np.arange(s - lo, s + c + hi)
        if periodic[ax]:
            i %= a.shape[ax]
        assert i.min() >= 0 and i.max() < a.shape[ax]
        index.append(i)
    return a[np.ix_(*index)]


def _assembled_blocks(a, chunks, reach, boundary):
    """Every chunk's (plan, block assembled from the NumPy chunks of ``a``)."""
    axes = [halo._axis_pieces(c, r, b) for c, r, b in zip(chunks, reach, boundary)]
    bounds = [np.cumsum((0,) + c) for c in chunks]
    blocks = {}
    for idx in np.ndindex(*(len(c) for c in chunks)):
        sources, cuts, shape, present = halo._block_plan(idx, axes, chunks, remote=lambda nb: False)
        neighbours = tuple(nb for nb, _ in sources)
        pieces = [a[tuple(slice(bounds[ax][j], bounds[ax][j + 1]) for ax, j in enumerate(nb))]
                  for nb in neighbours]
        blocks[idx] = (neighbours, cuts, present, cd.assemble_halo(pieces, cuts, shape))
    return blocks, bounds


@pytest.mark.parametrize("chunks,reach,boundary", [
    # asymmetric reach, array edges (no halo there), corners
    (((4, 5, 3), (6, 6)), ((3, 1), (0, 2)), ("none", "none")),
    # periodic along an axis of 2 chunks (both halos from the other chunk) and of 3 chunks
    (((6, 6), (4, 4, 4)), ((2, 3), (1, 2)), ("periodic", "periodic")),
    # periodic with one chunk: no halo (the wrap mode does it); an axis with reach 0
    (((12,), (3, 5, 4), (5, 5)), ((4, 4), (0, 2), (0, 0)), ("periodic", "none", "none")),
    # 3 chunks periodic next to none, one-sided reaches
    (((4, 4, 4), (7, 5)), ((0, 3), (2, 0)), ("periodic", "none")),
])
def test_assemble_halo_cuts_exactly_the_reach(chunks, reach, boundary):
    rng = np.random.default_rng(len(chunks[0]))
    a = rng.standard_normal(tuple(sum(c) for c in chunks))
    periodic = [b == "periodic" for b in boundary]
    blocks, bounds = _assembled_blocks(a, chunks, reach, boundary)
    for idx, (neighbours, cuts, present, block) in blocks.items():
        sizes = [chunks[ax][i] for ax, i in enumerate(idx)]
        for ax, i in enumerate(idx):
            n, (left, right), size = len(chunks[ax]), reach[ax], sizes[ax]
            lo, hi = present[ax]
            if n == 1:
                assert (lo, hi) == (0, 0)
            elif periodic[ax]:
                assert (lo, hi) == (left, right)
            else:  # an edge chunk's inward halo also covers what the mode reflects
                assert lo == (0 if i == 0 else max(left, right + 1 - size) if i == n - 1
                              else left)
                assert hi == (0 if i == n - 1 else max(right, left + 1 - size) if i == 0
                              else right)
        starts = [bounds[ax][i] for ax, i in enumerate(idx)]
        np.testing.assert_array_equal(block, _expected_block(a, starts, sizes, present, periodic))
        # each distinct neighbour once among the task's inputs, one cut per piece
        assert len(set(neighbours)) == len(neighbours)
        pieces_per_axis = [1 + (lo > 0) + (hi > 0) for lo, hi in present]
        assert len(cuts) == int(np.prod(pieces_per_axis))


def test_periodic_two_chunks_read_one_neighbour_twice():
    a = np.arange(10.0)
    blocks, _ = _assembled_blocks(a, ((5, 5),), ((2, 3),), ("periodic",))
    neighbours, cuts, present, block = blocks[(0,)]
    assert neighbours == ((0,), (1,)) and len(cuts) == 3 and present == ((2, 3),)
    np.testing.assert_array_equal(block, [8, 9, 0, 1, 2, 3, 4, 5, 6, 7])


def test_edge_chunk_takes_the_halo_its_mode_reflects():
    """A 2-element edge chunk of a filter reaching (2, 0): mirror mode reads element 2 for the
    first output, so the chunk takes a right halo of 1 though the filter reaches 0 to the
    right."""
    assert halo._axis_pieces((2, 3, 4), (2, 0), "none") == [
        (((0, 0, 2), (1, 0, 1)), 0, 1), (((0, 0, 2), (1, 0, 3)), 2, 0),
        (((1, 1, 3), (2, 0, 4)), 2, 0)]
    # and mirrored: the last chunk of a filter reaching (0, 3) takes a left halo of 1
    assert halo._axis_pieces((3, 3), (0, 3), "none")[1] == (((0, 2, 3), (1, 0, 3)), 1, 0)
    with pytest.raises(ValueError, match="rechunk_for_depth"):
        halo._axis_pieces((1, 5), (2, 2), "none")


def test_untrimmed_windows_take_exactly_their_reach():
    """Without trimming (the 'valid' windows of signal/conv) no mode reads past the block, so an
    edge chunk takes no extra halo: each result's shape stays what out_chunks says."""
    assert halo._axis_pieces((2, 3), (2, 0), "none", edge_mode=False)[0] == (((0, 0, 2),), 0, 0)
    assert halo._axis_pieces((2, 3), (2, 0), "none")[0] == (((0, 0, 2), (1, 0, 1)), 0, 1)


def test_no_halo_block_is_the_chunk_and_wide_halos_are_trimmed_by_copy():
    chunk = np.arange(12.0).reshape(3, 4)
    assert cd.assemble_halo([chunk], ((0, ((0, 3), (0, 4)), ((0, 3), (0, 4))),), (3, 4)) is chunk
    padded = np.arange(30.0).reshape(5, 6)
    cuts = ((0, ((0, 5), (0, 6)), ((0, 5), (0, 6))),)
    # the halo doubles the block (30 of 12 elements): copied, so it does not pin the block
    got = halo._halo_task(lambda b: b * 2, cuts, (5, 6), (slice(1, 4), slice(2, 6)), padded[:, :6])
    np.testing.assert_array_equal(got, 2 * padded[1:4, 2:6])
    assert got.base is None and got.flags.c_contiguous
    untrimmed = halo._halo_task(lambda b: b + 1, cuts, (5, 6), None, padded)
    assert untrimmed.shape == (5, 6)
    # a thin halo (20 x 20 around 18 x 20: 1.11x) stays a view of the block's result
    big = np.arange(400.0).reshape(20, 20)
    cuts = ((0, ((0, 20), (0, 20)), ((0, 20), (0, 20))),)
    view = halo._halo_task(lambda b: b * 2, cuts, (20, 20), (slice(1, 19), slice(0, 20)), big)
    np.testing.assert_array_equal(view, 2 * big[1:19])
    assert view.base is not None and view.base.shape == (20, 20)
