"""Kernel-argument helpers shared by the launchers: sizes, strides and grids."""

from __future__ import annotations

import math

import numpy as np

from cupyconv._core.caches import memoized
from cupyconv._core.geometry import ConvGeometry
from cupyconv._core.program import keep_constant


def ints(values) -> list:
    """Sizes as 32-bit kernel arguments (every single dim fits; products are formed in 64 bits)."""
    return [np.int32(v) for v in values]


def spatial_args(geom: ConvGeometry) -> list:
    """The spatial block shared by the kernels' signatures: sizes, kernel, stride, dilation, pad."""
    g3 = geom.as_3d()
    return ints(g3["spatial"] + g3["out_spatial"] + g3["kernel"] + g3["stride"] + g3["dilation"]
                + g3["pad_lo"])


def int64s(values) -> list:
    """Strides and offsets as 64-bit kernel arguments."""
    return [np.int64(v) for v in values]


def element_strides(a, channels_last: bool) -> tuple[int, ...]:
    """(lead, channel, d, h, w) strides of an activation or weight array, in elements.

    Spatial dims are padded in front to three with stride 0 (their extent is 1), matching
    :meth:`ConvGeometry.as_3d`; negative and zero strides of views pass through unchanged.
    """
    s = [st // a.itemsize for st in a.strides]
    lead, spatial = s[0], s[1:-1] if channels_last else s[2:]
    channel = s[-1] if channels_last else s[1]
    return (lead, channel, *([0] * (3 - len(spatial))), *spatial)


GRID_YZ_MAX = 65535  # CUDA's limit on gridDim.y and gridDim.z (gridDim.x: 2^31 - 1)


def launch_grid(total: int, block: int = 256) -> tuple[tuple[int], tuple[int]]:
    """1-d grid for a grid-stride loop over ``total`` items (capped: the loop covers the rest)."""
    return (max(1, min(math.ceil(total / block), 1 << 20)),), (block,)


DEFAULT_SMEM = 48 * 1024  # dynamic shared memory a launch gets without opting in


@memoized(None)
def sm_count(device_id: int) -> int:
    """Multiprocessors of the device (the cost models' unit of parallelism)."""
    import cupy

    return cupy.cuda.runtime.getDeviceProperties(device_id)["multiProcessorCount"]


@memoized(None)
def device_smem_limit(device: int, most: int) -> int:
    """Dynamic shared memory a kernel may ask for on ``device`` (opting in beyond 48 KB where the
    device allows it: 227 KB on H100), at most ``most``, less 1 KB for the kernels' static arrays
    (a block at exactly the limit failed to launch)."""
    import cupy

    optin = cupy.cuda.Device(device).attributes.get("MaxSharedMemoryPerBlockOptin", DEFAULT_SMEM)
    return min(max(optin, DEFAULT_SMEM), most) - 1024


def upload_constant(host: np.ndarray):
    """A device copy of ``host`` that is complete when this returns, for any stream to read.

    Prepared launches are cached and reused from whatever stream a later call runs on; an upload
    queued on the current stream would be unordered with those (a first call on a busy stream s1,
    the same problem at once on s2, read the arguments before they arrived).  So the copy goes
    through a private non-blocking stream, waited for here; the memory comes from that stream's
    pool arena, which holds no block that queued work on another stream may still be using.
    """
    import cupy

    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        dev = cupy.empty(host.shape, dtype=host.dtype)
        dev.set(host, stream=stream)
    stream.synchronize()
    return keep_constant(dev)  # prepared calls point at it


class Launch:
    """A kernel launch planned once per problem: function, grid, block, shared memory and the
    scalar arguments, which follow the array arguments.  ``packed`` kernels take the scalars as
    one int64 array (uploaded here, once per problem and device) instead of ~35 arguments, which
    CuPy converts one by one on calls that do not replay a prepared program."""

    __slots__ = ("fn", "grid", "block", "smem", "scalars")

    def __init__(self, fn, grid, block, scalars, smem: int = 0, packed: bool = False):
        self.fn, self.grid, self.block, self.smem = fn, tuple(grid), tuple(block), smem
        if smem > DEFAULT_SMEM:  # opt in (the caller sized smem by device_smem_limit)
            fn.max_dynamic_shared_size_bytes = smem
        if packed:
            self.scalars = (upload_constant(np.array([int(v) for v in scalars], dtype=np.int64)),)
        else:
            self.scalars = tuple(scalars)

    def __call__(self, *arrays) -> None:
        self.fn(self.grid, self.block, arrays + self.scalars, shared_mem=self.smem)
