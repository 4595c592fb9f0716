"""CPU check of the row slabs that split implicit-GEMM problems of more than MAX_GEMM_ROWS rows
(output pixels) into launches the kernels' 32-bit row indexing can take: every output row lies in
exactly one slab, no slab is over the limit, and each slab's shifted padding puts every one of
its pixels' windows where the whole problem puts them."""

import itertools
import math

import pytest

from cupyconv._gemm.kernel_args import ImplicitConv
from cupyconv._gemm.launch import row_slabs
from cupyconv._core.geometry import ConvGeometry


def _prob(batch, spatial, kernel, stride, dilation, padding, layout="NCHW"):
    nd = len(spatial)
    xs = (batch, 3, *spatial) if layout == "NCHW" else (batch, *spatial, 3)
    ws = (2, 3, *kernel) if layout == "NCHW" else (2, *kernel, 3)
    geom = ConvGeometry.from_shapes(xs, ws, stride=stride, dilation=dilation, padding=padding,
                                    layout=layout, dtype="float32")
    assert geom.ndim == nd
    return ImplicitConv.from_geometry(geom)


PROBLEMS = [
    (3, (17,), (3,), 2, 1, 1),
    (2, (9, 11), (3, 3), (2, 1), (1, 2), [(1, 0), (2, 1)]),
    (1, (13, 7), (3, 3), 1, 1, "same"),
    (2, (5, 6, 7), (3, 2, 3), (1, 2, 2), 1, [(1, 1), (0, 1), (2, 0)]),
    (1, (4, 9, 5), (1, 3, 3), 1, (1, 2, 1), 1),
]


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 7, 16, 40, 10 ** 6])
@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: f"{len(p[1])}d")
def test_slabs_cover_every_row_once_within_the_limit(problem, limit):
    prob = _prob(*problem)
    seen = []
    for sub, index in row_slabs(prob, limit):
        rows = sub.batch * math.prod(sub.out_spatial)
        assert 1 <= rows <= max(limit, 1)
        n0 = index[0].start
        lo = tuple(s.start for s in index[1:]) + (0,) * (3 - len(index[1:]))
        for n in range(sub.batch):
            for local in itertools.product(*(range(e) for e in sub.out_spatial)):
                glob = tuple(a + b for a, b in zip(local, lo))
                seen.append((n0 + n,) + glob)
                # the window origin of this pixel in the slab equals the whole problem's
                for d in range(3):
                    assert (local[d] * sub.stride[d] - sub.pad_lo[d]
                            == glob[d] * prob.stride[d] - prob.pad_lo[d])
        assert sub.spatial == prob.spatial and sub.kernel == prob.kernel
    expected = [(n,) + p for n in range(prob.batch)
                for p in itertools.product(*(range(e) for e in prob.out_spatial))]
    assert sorted(seen) == expected


def test_a_problem_within_the_limit_is_one_slab():
    prob = _prob(*PROBLEMS[1])
    slabs = list(row_slabs(prob, 10 ** 9))
    assert len(slabs) == 1 and slabs[0][0] == prob and slabs[0][1] == (slice(0, prob.batch),)


def test_the_issue_problem_splits_along_rows():
    """dy (1, 1, 46341, 46341), 3x3, padding 1: 2^31 + 4633 pixels in one image."""
    prob = _prob(1, (46341, 46341), (3, 3), 1, 1, 1)
    slabs = list(row_slabs(prob))
    assert len(slabs) == 3
    assert all(sub.out_spatial[2] == 46341 and sub.batch == 1 for sub, _ in slabs)
    assert sum(sub.out_spatial[1] for sub, _ in slabs) == 46341
