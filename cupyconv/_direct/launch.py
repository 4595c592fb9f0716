"""Launcher of the direct convolution kernel (``kernel_src/direct_conv.cu``)."""

from __future__ import annotations

import numpy as np

from cupyconv._core import jit
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import DIRECT_CONV
from cupyconv._core.launch import element_strides, int64s, ints, launch_grid, spatial_args


def run_direct(geom: ConvGeometry, x, w, bias, y) -> None:
    """y = conv(x, w) + bias with one thread per output element (all options, any strides)."""
    fn = jit.get_function(DIRECT_CONV, "direct_conv", geom.dtype)
    cl = geom.channels_last
    total = int(np.prod(geom.output_shape))
    args = [x, w, bias if bias is not None else y, y, *ints((bias is not None,)),
            *ints((geom.batch, geom.in_channels, geom.out_channels, geom.groups)),
            *spatial_args(geom),
            *int64s(element_strides(x, cl) + element_strides(w, cl) + element_strides(y, cl)),
            *ints((cl,))]
    grid, block = launch_grid(total)
    with x.device:
        fn(grid, block, tuple(args))
