"""Launchers of the direct convolution kernels (``kernel_src/direct/direct_conv.cu``): the forward
GPU reference, and the repair passes after a GEMM over merged groups (see there)."""

from __future__ import annotations

import numpy as np

from cupyconv._core import jit
from cupyconv._core.activation import NO_ACTIVATION
from cupyconv._core.epilogue import same_strides
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.kernels import DIRECT_CONV, KERNEL_CONSTANTS
from cupyconv._core.launch import element_strides, int64s, ints, launch_grid, spatial_args


def nan_scan_threads(total: int, itemsize: int) -> int:
    """Threads of a repair pass over ``total`` elements: each tests NAN_SCAN_UNROLL times 16
    bytes of the result per step (``for_each_nan`` in direct_conv.cu)."""
    return -(-total // (max(1, 16 // itemsize) * KERNEL_CONSTANTS["NAN_SCAN_UNROLL"]))


def run_direct(geom: ConvGeometry, x, w, bias, y, *, z=None, act: int = NO_ACTIVATION,
               only_nan: bool = False) -> None:
    """y = act(conv(x, w) + bias + z) with one thread per output element (all options, any
    strides of x, w and y); bias, z and the activation code ``act`` optional, z with y's strides
    (the kernel reads it at y's element offsets).  ``only_nan``: recompute only the elements of y
    that are NaN (the repair pass after a merged-groups GEMM, :func:`repair_merged_forward`)."""
    if z is not None and not same_strides(z, y):
        raise ValueError("run_direct reads z through y's strides: pass z with y's strides")
    if only_nan and not y.flags.c_contiguous:
        raise ValueError("the repair pass reads y as C-contiguous: pass a C-contiguous y")
    fn = jit.get_function(DIRECT_CONV, "direct_conv", geom.dtype)
    cl = geom.channels_last
    total = int(np.prod(geom.output_shape))
    args = [x, w, bias if bias is not None else y, z if z is not None else y, y,
            *ints((bias is not None, z is not None, act)),
            *ints((geom.batch, geom.in_channels, geom.out_channels, geom.groups)),
            *spatial_args(geom),
            *int64s(element_strides(x, cl) + element_strides(w, cl) + element_strides(y, cl)),
            *ints((cl, only_nan))]
    grid, block = launch_grid(nan_scan_threads(total, y.itemsize) if only_nan else total)
    with x.device:
        fn(grid, block, tuple(args))


def repair_merged_forward(geom: ConvGeometry, x, w, bias, y, *, z=None,
                          act: int = NO_ACTIVATION) -> None:
    """After the forward GEMM over merged groups wrote y: recompute, from ``geom``'s own groups and
    weights ``w``, the outputs that are NaN, so that a NaN or inf of one group's input reaches only
    that group's outputs (one pass reading y; see direct_conv.cu)."""
    run_direct(geom, x, w, bias, y, z=z, act=act, only_nan=True)


def repair_merged_data(geom: ConvGeometry, dy, w, bias, dx) -> None:
    """After backward-data over merged groups wrote dx (with ``bias`` added, if given): recompute
    from ``geom``'s own groups and weights ``w`` the elements of dx that are NaN (as
    :func:`repair_merged_forward`).  dx C-contiguous, dy and w any strides."""
    if not dx.flags.c_contiguous:
        raise ValueError("the repair pass reads dx as C-contiguous: pass a C-contiguous dx")
    fn = jit.get_function(DIRECT_CONV, "direct_dgrad", geom.dtype)
    cl = geom.channels_last
    args = [dy, w, bias if bias is not None else dx, dx, *ints((bias is not None,)),
            *ints((geom.batch, geom.in_channels, geom.out_channels, geom.groups)),
            *spatial_args(geom),
            *int64s(element_strides(dy, cl) + element_strides(w, cl) + element_strides(dx, cl)),
            *ints((cl, True))]
    grid, block = launch_grid(nan_scan_threads(int(np.prod(geom.input_shape)), dx.itemsize))
    with dx.device:
        fn(grid, block, tuple(args))
