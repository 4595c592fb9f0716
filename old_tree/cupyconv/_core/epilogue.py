"""The fused epilogue's residual and activation as a pass of their own (``epilogue_pass.cu``).

The GEMM and direct kernels apply ``act(conv + bias + z)`` in their own stores; the kernels that
do not (depthwise) write ``conv + bias`` and this pass finishes ``y = act(y + z)`` in place: one
recorded launch, so prepared calls replay it like any other kernel of the call.
"""

from __future__ import annotations

import math

from cupyconv._core import jit
from cupyconv._core.activation import NO_ACTIVATION
from cupyconv._core.copy import contiguous
from cupyconv._core.kernels import EPILOGUE_PASS
from cupyconv._core.launch import int64s, ints, launch_grid


def needs_epilogue(z, act: int) -> bool:
    """Whether a residual or an activation is to be applied at all."""
    return z is not None or act != NO_ACTIVATION


def same_strides(a, b) -> bool:
    """Arrays of one shape whose elements lie at the same offsets from their bases (strides of
    extent-1 dims do not matter): the kernels read z at the output's element offsets."""
    return a.shape == b.shape and all(n == 1 or sa == sb
                                      for n, sa, sb in zip(a.shape, a.strides, b.strides))


def residual_like(z, y):
    """The residual ``z`` (or None) as the kernels read it: with the strides of the C-contiguous
    output ``y``; any other view is copied once, by a recorded kernel (:func:`contiguous`)."""
    if z is None or same_strides(z, y):
        return z
    return contiguous(z)


def run_epilogue_pass(y, z, act: int) -> None:
    """``y = act(y + z)`` in place (z None: ``y = act(y)``) on the current device; y and z
    C-contiguous arrays of one shape and dtype, ``act`` an activation code
    (:mod:`cupyconv._core.activation`)."""
    if not needs_epilogue(z, act):
        return
    if not y.flags.c_contiguous or (z is not None and not same_strides(z, y)):
        raise ValueError("run_epilogue_pass needs a C-contiguous y and z with its strides")
    total = math.prod(y.shape)
    if total == 0:
        return
    fn = jit.get_function(EPILOGUE_PASS, "epilogue_pass", y.dtype.name)
    grid, block = launch_grid(total)
    fn(grid, block, (y, z if z is not None else y, *ints((z is not None, act)), *int64s((total,))))
