"""The package's strided copy on the GPU (``cupyconv._core.copy.copy_into``): element-wise and
tiled-transpose kernels against the array itself, for layout changes, views with offsets and
negative strides, odd extents and every storage dtype, into poisoned outputs."""

import numpy as np
import pytest

from cupyconv._core.copy import _merged, _transposed_pair, copy_into
from cupyconv._core.verify import random_array

pytestmark = pytest.mark.gpu

CASES = [
    ((2, 40, 17, 33), (0, 2, 3, 1), (slice(None),) * 4),           # NCHW -> NHWC, odd extents
    ((2, 17, 33, 40), (0, 3, 1, 2), (slice(None),) * 4),           # NHWC -> NCHW
    ((3, 50, 70), (2, 0, 1), (slice(None), slice(None, None, -1), slice(1, None))),  # reversed
    ((64, 48), (1, 0), (slice(3, 60), slice(None, None, -1))),       # offset and reversed dims
    ((2, 3, 33, 17, 20), (4, 1, 0, 3, 2), (slice(None),) * 5),     # 5-d, several outer dims
    ((4, 3, 20, 20), (0, 2, 3, 1), (slice(None),) * 4),            # 3 channels: element-wise
    ((5, 7, 9), (0, 1, 2), (slice(None), slice(None, None, 2), slice(None))),  # plain strided
]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("shape,perm,index", CASES)
def test_copy_into_matches_the_view(shape, perm, index, dtype):
    import cupy

    rng = np.random.default_rng(sum(shape) + len(dtype))
    base = cupy.asarray(random_array(rng, shape, dtype))
    src = base.transpose(perm)[index[:len(shape)]]
    dst = cupy.empty(src.shape, base.dtype)
    dst.view(cupy.uint8).fill(0xFF)  # NaN in every float type
    copy_into(src, dst)
    # the expected bits through CuPy's own copy of the same view as unsigned integers
    bits = f"uint{8 * base.itemsize}"
    want = cupy.ascontiguousarray(base.view(bits).transpose(perm)[index[:len(shape)]])
    np.testing.assert_array_equal(cupy.asnumpy(dst.view(bits)), cupy.asnumpy(want))


def test_layout_changes_take_the_tiled_kernel():
    import cupy

    src = cupy.zeros((2, 64, 40, 40), cupy.float32).transpose(0, 2, 3, 1)
    item = src.itemsize
    dims = _merged(src.shape, [s // item for s in src.strides],
                   [s // item for s in cupy.empty(src.shape, src.dtype).strides])
    assert _transposed_pair(dims) is not None
