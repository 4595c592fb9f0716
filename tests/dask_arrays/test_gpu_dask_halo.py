"""Halo assembly of CuPy chunks (``cupyconv/dask/halo.py``) on the device."""

import numpy as np
import pytest

pytest.importorskip("dask.array")  # "dask" alone could resolve to this folder as a namespace

import cupyconv.dask as cd  # noqa: E402
from cupyconv.dask import halo  # noqa: E402

pytestmark = pytest.mark.gpu


def test_cupy_blocks_are_assembled_on_the_device_and_trimmed_by_copy():
    """assemble_halo on CuPy chunks builds a CuPy block equal to the NumPy assembly of the same
    chunks, and a task's trimmed result is a C-contiguous CuPy array owning its memory (it does
    not pin the padded block)."""
    import cupy

    a = np.random.default_rng(41).uniform(-1, 1, (12, 10, 9)).astype(np.float32)
    chunks = ((4, 4, 4), (5, 5), (3, 6))
    axes = [halo._axis_pieces(c, r, b) for c, r, b in
            zip(chunks, ((2, 1), (0, 3), (2, 2)), ("periodic", "none", "none"))]
    bounds = [np.cumsum((0,) + c) for c in chunks]
    for idx in np.ndindex(3, 2, 2):
        sources, cuts, shape, present = halo._block_plan(idx, axes, chunks, remote=lambda nb: False)
        neighbours = tuple(nb for nb, _ in sources)
        host = [a[tuple(slice(bounds[ax][j], bounds[ax][j + 1]) for ax, j in enumerate(nb))]
                for nb in neighbours]
        dev = [cupy.asarray(p) for p in host]
        block = cd.assemble_halo(dev, cuts, shape)
        assert isinstance(block, cupy.ndarray) and block.shape == tuple(shape)
        np.testing.assert_array_equal(cupy.asnumpy(block), cd.assemble_halo(host, cuts, shape))
        interior = tuple(slice(lo, n - hi) for (lo, hi), n in zip(present, shape))
        out = halo._halo_task(lambda b: b * 2, cuts, shape, interior, *dev)
        assert isinstance(out, cupy.ndarray) and out.flags.c_contiguous and out.base is None
        np.testing.assert_array_equal(cupy.asnumpy(out), 2 * host[neighbours.index(idx)])
