"""Launcher of the direct convolution kernel (``kernel_src/direct_conv.cu``)."""

from __future__ import annotations

import numpy as np

from cupyconv._core import jit
from cupyconv._core.activation import NO_ACTIVATION
from cupyconv._core.epilogue import same_strides
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import DIRECT_CONV
from cupyconv._core.launch import element_strides, int64s, ints, launch_grid, spatial_args


def run_direct(geom: ConvGeometry, x, w, bias, y, *, z=None, act: int = NO_ACTIVATION) -> None:
    """y = act(conv(x, w) + bias + z) with one thread per output element (all options, any
    strides of x, w and y); bias, z and the activation code ``act`` optional, z with y's strides
    (the kernel reads it at y's element offsets)."""
    if z is not None and not same_strides(z, y):
        raise ValueError("run_direct reads z through y's strides: pass z with y's strides")
    fn = jit.get_function(DIRECT_CONV, "direct_conv", geom.dtype)
    cl = geom.channels_last
    total = int(np.prod(geom.output_shape))
    args = [x, w, bias if bias is not None else y, z if z is not None else y, y,
            *ints((bias is not None, z is not None, act)),
            *ints((geom.batch, geom.in_channels, geom.out_channels, geom.groups)),
            *spatial_args(geom),
            *int64s(element_strides(x, cl) + element_strides(w, cl) + element_strides(y, cl)),
            *ints((cl,))]
    grid, block = launch_grid(total)
    with x.device:
        fn(grid, block, tuple(args))
