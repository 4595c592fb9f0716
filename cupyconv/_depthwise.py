"""Depthwise forward convolution (groups == input channels): launcher and applicability."""

from __future__ import annotations

import math

from . import jit
from ._geometry import ConvGeometry
from ._kernels import DEPTHWISE_FWD, DEPTHWISE_TILE
from ._launch import element_strides, int64s, ints, launch_grid

SMEM_LIMIT = 48 * 1024  # static-launch limit: larger halo tiles fall back to other methods
GRID_Y_MAX = 65535


def is_depthwise(geom: ConvGeometry) -> bool:
    return geom.groups > 1 and geom.groups == geom.in_channels


def _tile_bytes(geom: ConvGeometry) -> int:
    """Shared memory of one channels-first block: its output tile plus halo, one depth slice."""
    g3 = geom.as_3d()
    tw, th = DEPTHWISE_TILE
    _, kh, kw = g3["kernel"]
    _, sh, sw = g3["stride"]
    _, dh, dw = g3["dilation"]
    rows, cols = (th - 1) * sh + (kh - 1) * dh + 1, (tw - 1) * sw + (kw - 1) * dw + 1
    return rows * cols * (8 if geom.dtype == "float64" else 4)


def _tiles(geom: ConvGeometry) -> tuple[int, int]:
    oh, ow = geom.as_3d()["out_spatial"][1:]
    return math.ceil(oh / DEPTHWISE_TILE[1]), math.ceil(ow / DEPTHWISE_TILE[0])


def depthwise_applicable(geom: ConvGeometry) -> bool:
    if not is_depthwise(geom):
        return False
    if geom.channels_last:
        return True
    th, tw = _tiles(geom)
    planes = geom.batch * geom.out_channels * geom.as_3d()["out_spatial"][0]
    return _tile_bytes(geom) <= SMEM_LIMIT and th * tw <= GRID_Y_MAX and planes < 2 ** 31


def run_depthwise(geom: ConvGeometry, x, w, bias, y) -> None:
    """y = depthwise conv(x, w) + bias; y C-contiguous."""
    import cupy

    g3 = geom.as_3d()
    w = cupy.ascontiguousarray(w)  # (K, taps) in memory for both layouts (one channel per group)
    spatial = ints(g3["spatial"] + g3["out_spatial"] + g3["kernel"] + g3["stride"]
                   + g3["dilation"] + g3["pad_lo"])
    xs = int64s(element_strides(x, geom.channels_last))
    mult = geom.out_channels // geom.in_channels
    b = bias if bias is not None else y
    with y.device:
        if geom.channels_last:
            fn = jit.get_function(DEPTHWISE_FWD, "depthwise_fwd_nhwc", geom.dtype)
            grid, block = launch_grid(y.size)
            fn(grid, block, (x, w, b, y, *ints((bias is not None, geom.batch, geom.out_channels,
                                                 mult)), *spatial, *xs))
            return
        fn = jit.get_function(DEPTHWISE_FWD, "depthwise_fwd_nchw", geom.dtype)
        th, tw = _tiles(geom)
        planes = geom.batch * geom.out_channels * g3["out_spatial"][0]
        fn((planes, th * tw), (DEPTHWISE_TILE[0] * DEPTHWISE_TILE[1],),
           (x, w, b, y, *ints((bias is not None, geom.out_channels, mult)), *spatial, *xs,
            *ints((tw,))), shared_mem=_tile_bytes(geom))
