"""Problems past CUDA's 65535 limit on the launch grid's y and z extents: batches of more GEMMs,
more GEMM columns, more (image, group) pairs than one launch holds, against float64 references."""

import numpy as np
import pytest

import cupyconv
from cupyconv import reference

pytestmark = pytest.mark.gpu

GRID_YZ = 65535


def _rel(got, ref):
    got = got.get().astype(np.float64)
    return np.linalg.norm(got - ref) / np.linalg.norm(ref)


def test_gemm_batch_beyond_the_grid():
    import cupy

    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((GRID_YZ + 9, 3, 5)), rng.standard_normal((GRID_YZ + 9, 5, 2))
    out = cupy.full((GRID_YZ + 9, 3, 2), np.nan, dtype=cupy.float32)
    got = cupyconv.gemm(cupy.asarray(a, dtype=cupy.float32), cupy.asarray(b, dtype=cupy.float32),
                        out=out)
    assert got is out and _rel(got, a @ b) < 1e-5


def test_gemm_columns_beyond_the_grid():
    import cupy

    rng = np.random.default_rng(1)
    n = 64 * GRID_YZ + 7
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, n))
    got = cupyconv.gemm(cupy.asarray(a, dtype=cupy.float32), cupy.asarray(b, dtype=cupy.float32))
    assert _rel(got, a @ b) < 1e-5


def test_pointwise_conv_with_more_image_group_pairs_than_the_grid():
    """Channels-first 1x1 on 32x32 images runs one GEMM per (image, group) pair, unless there are
    more pairs than the grid holds: then the implicit kernel, whose rows span images."""
    import cupy

    rng = np.random.default_rng(2)
    xh = rng.standard_normal((GRID_YZ // 2 + 3, 4, 32, 32)).astype(np.float32)
    wh = rng.standard_normal((4, 2, 1, 1)).astype(np.float32)
    got = cupyconv.conv(cupy.asarray(xh), cupy.asarray(wh), groups=2, method="implicit_gemm")
    ref = reference.conv(xh[-40:], wh, groups=2)
    assert _rel(got[-40:], ref) < 1e-5
    ref = reference.conv(xh[:40], wh, groups=2)
    assert _rel(got[:40], ref) < 1e-5


def test_backward_implicit_gemm_refuses_more_groups_than_the_grid():
    import cupy

    c = GRID_YZ + 1
    dy = cupy.ones((1, 2 * c, 1), dtype=cupy.float32)
    w = cupy.ones((2 * c, 2, 1), dtype=cupy.float32)
    with pytest.raises(ValueError, match="groups"):
        cupyconv.conv_backward_data(dy, w, (1, 2 * c, 1), groups=c, method="implicit_gemm")
