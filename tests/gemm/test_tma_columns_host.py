"""The few-channel column route's host rules (``_gemm/tma_columns.py``), without a GPU: the
padded row width, the batch chunks, the cost estimate, which problems it declines, and that the
kernels' shared column table holds the widest row the host lets through."""

import re
from pathlib import Path

import pytest

from cupyconv._core.geometry import ConvGeometry
from cupyconv._gemm import tma_columns


def _geom(x_shape, k, kernel, dtype="bfloat16", layout="NHWC", **opts):
    c = (x_shape[-1] if layout == "NHWC" else x_shape[1]) // opts.get("groups", 1)
    w_shape = (k, *kernel, c) if layout == "NHWC" else (k, c, *kernel)
    return ConvGeometry.from_shapes(x_shape, w_shape, layout=layout, dtype=dtype, **opts)


@pytest.mark.parametrize("x_shape,kernel,width", [
    ((32, 224, 224, 3), (7, 7), 152),   # 147 real columns
    ((32, 224, 224, 3), (3, 3), 32),    # 27
    ((32, 224, 224, 3), (4, 4), 48),    # 48: no padding
    ((8, 100, 1), (9,), 16),            # 1-d, one channel
    ((2, 8, 8, 8, 3), (3, 3, 3), 88),   # 3-d: 81
])
def test_rows_are_padded_to_16_bytes(x_shape, kernel, width):
    assert tma_columns.column_width(_geom(x_shape, 64, kernel)) == width


def test_chunks_keep_the_column_matrix_under_the_limit():
    g = _geom((256, 224, 224, 3), 64, (7, 7), stride=2, padding=3)
    row = tma_columns.column_width(g) * 4          # backward-data's fp32 rows
    chunk = tma_columns._chunk(g, row)
    assert chunk * 112 * 112 * row <= tma_columns.CHUNK_BYTES < (chunk + 1) * 112 * 112 * row
    small = _geom((2, 20, 20, 3), 64, (3, 3), padding=1)
    assert tma_columns._chunk(small, 64) == 2      # the whole batch
    huge = _geom((2, 4000, 4000, 3), 64, (7, 7), padding=3)
    assert tma_columns._chunk(huge, 608) == 1      # at least one image


@pytest.mark.parametrize("x_shape,k,kernel,opts,measured_us", [
    ((32, 224, 224, 3), 64, (7, 7), dict(stride=2, padding=3), 254),
    ((32, 224, 224, 3), 32, (3, 3), dict(stride=2, padding=1), 88),
    ((32, 224, 224, 3), 96, (4, 4), dict(stride=4), 58),
])
def test_the_estimate_is_within_a_third_of_the_stems_measured(x_shape, k, kernel, opts,
                                                              measured_us):
    g = _geom(x_shape, k, kernel, **opts)
    assert 0.67 < tma_columns.seconds(g) / (measured_us * 1e-6) < 1.5


@pytest.mark.parametrize("geom", [
    _geom((4, 50, 50, 8), 64, (3, 3)),                        # whole 16-byte chunks
    _geom((4, 50, 50, 3), 64, (3, 3), dtype="float32"),       # not a TMA dtype
    _geom((4, 3, 50, 50), 64, (3, 3), layout="NCHW"),         # channels-first
    _geom((4, 50, 50, 6), 64, (3, 3), groups=2),              # grouped
    _geom((4, 50, 50, 7), 64, (13, 13)),                      # 1183 columns: over MAX_WIDTH
])
def test_declined_problems(geom):
    assert not tma_columns.applies(geom, 0)


def test_the_kernel_table_holds_the_widest_row():
    src = (Path(tma_columns.__file__).parents[1] / "kernel_src/gemm/im2col.cu").read_text()
    assert int(re.search(r"IM2COL_ROWS_MAX = (\d+);", src).group(1)) == tma_columns.MAX_WIDTH



def test_without_a_device_nothing_applies():
    """The forward cost model asks the route of modelled devices: where CUDA sees no GPU the
    answer is no, not an error."""
    import cupy

    try:
        cupy.cuda.runtime.getDeviceCount()
    except cupy.cuda.runtime.CUDARuntimeError:
        g = _geom((32, 224, 224, 3), 64, (7, 7), stride=2, padding=3)
        assert not tma_columns.applies(g, 0)
    else:
        pytest.skip("a GPU is present")
