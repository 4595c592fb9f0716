"""Size limits, checked for every operation (convolutions, the GEMM, the signal and image filters)
before anything is allocated or compiled, and the integer arguments they apply to.

Pure Python: needs no GPU and no CuPy (NumPy only to size dtypes, through
:mod:`cupyconv._core.dtypes`).  :mod:`cupyconv._core.geometry` applies them to every convolution
problem.
"""

from __future__ import annotations

import math
import operator

from cupyconv._core.dtypes import itemsize
from cupyconv._core.names import arg

# The kernels take every single extent (batch, channels, groups, each spatial size of the input,
# output and kernel, stride, dilation, padding) as a 32-bit int and form products (element counts,
# offsets) in 64 bits.  So each extent must be below EXTENT_LIMIT; with the padded input extent
# below it too, every in-kernel coordinate ``out * stride - pad + tap * dilation`` fits 32 bits.
EXTENT_LIMIT = 2 ** 31
# No tensor may hold more than MAX_TENSOR_BYTES (256 TiB; MAX_TENSOR_BYTES elements where the
# dtype is not known).  Why 2**48: GPU virtual address spaces are 47 to 49 bits (x86-64 user space
# and CUDA's unified addressing: 47; AMD GPUs: 48; some ARM/Grace systems: 49), so no device buffer
# can be larger, and the biggest GPU memories are ~2**38 bytes: a larger size is a mistake in the
# arguments, not a problem to run.  It also leaves 64-bit element and byte offsets 2**15 of
# headroom.  Below it, a new output larger than the device's whole memory is refused where it is
# allocated (``_arrays.check_fits_device``); one that merely does not fit what is free now is
# CuPy's OutOfMemoryError, as for any allocation.
MAX_TENSOR_BYTES = 2 ** 48
_LIMIT_WHY = "(the kernels take every extent as a 32-bit int)"


def as_int(v, name: str) -> int:
    # Python and NumPy integers (anything with __index__), but not bool and not float.
    if isinstance(v, bool) or not hasattr(type(v), "__index__"):
        raise TypeError(f"{arg(name)} must be an integer, got {v!r} ({type(v).__name__})")
    return operator.index(v)


def check_extents(name: str, values, where: str = "") -> None:
    """Raise ValueError unless every int in ``values`` is below :data:`EXTENT_LIMIT` (2**31)."""
    values = tuple(values)
    if any(v >= EXTENT_LIMIT for v in values):
        got = values[0] if len(values) == 1 else values
        raise ValueError(f"{arg(name)} must be < 2**31{where} {_LIMIT_WHY}, got {got!r}")


def check_tensor_size(name: str, shape, dtype=None) -> None:
    """Raise ValueError when a tensor of ``shape`` (and ``dtype``; without one, 1 byte an element)
    would take more than :data:`MAX_TENSOR_BYTES` (2**48 bytes, more than any GPU addresses)."""
    elements = math.prod(shape)
    size = 1 if dtype is None else itemsize(dtype)
    if elements * size > MAX_TENSOR_BYTES:
        unit = "bytes" if dtype is not None else "elements"
        raise ValueError(f"{name} of shape {tuple(shape)} would hold {elements * size:.3g} "
                         f"{unit}, more than the limit of 2**48 {unit} (256 TiB, more than any "
                         f"GPU can address)")


def check_matrix_product(m: int, n: int, k: int, batch: int | None, dtype=None) -> None:
    """The limits for a (batched) matrix product ``(m x k) @ (k x n)``: each of m, n, k and the
    batch below 2**31 (the GEMM kernel takes them as 32-bit ints), the result within 2**48 bytes."""
    for name, v in (("m (rows of a)", m), ("n (columns of b)", n), ("k (the inner dim)", k),
                    ("the batch size", batch or 1)):
        check_extents(f"gemm: {name}", (v,))
    check_tensor_size("gemm: the result", (m, n) if batch is None else (batch, m, n), dtype)
