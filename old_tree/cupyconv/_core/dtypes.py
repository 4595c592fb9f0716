"""The floating-point types of the convolution kernels on the host: NumPy dtypes, sizes and
compute types, in one place.

bfloat16 is not a NumPy type.  The ml_dtypes package defines it (CuPy's bfloat16 arrays carry
``ml_dtypes.bfloat16``), and ``numpy.dtype("bfloat16")`` resolves only once ml_dtypes has been
imported.  Every dtype given by name therefore goes through :func:`numpy_dtype`, which imports
ml_dtypes when bfloat16 is named, so no caller depends on an import order.
"""

from __future__ import annotations

import numpy as np

# Storage types of 2 bytes: the kernels load them, widen to float32 and accumulate in float32.
HALF_DTYPES = ("float16", "bfloat16")


def bfloat16():
    """The ``ml_dtypes.bfloat16`` scalar type, imported on first use (only bfloat16 work needs
    ml_dtypes)."""
    try:
        import ml_dtypes
    except ImportError as exc:  # pragma: no cover - ml_dtypes is a dependency
        raise ImportError("bfloat16 arrays need the ml_dtypes package: pip install ml_dtypes") from exc
    return ml_dtypes.bfloat16


def numpy_dtype(dtype) -> np.dtype:
    """``dtype`` (a name, a scalar type or a dtype) as a NumPy dtype; ``"bfloat16"`` included."""
    if isinstance(dtype, str) and dtype == "bfloat16":
        return np.dtype(bfloat16())
    return np.dtype(dtype)


def dtype_name(dtype) -> str:
    """The canonical name of ``dtype`` (``"float16"``, ``"bfloat16"``, ...)."""
    return numpy_dtype(dtype).name


def itemsize(dtype) -> int:
    """Bytes per element of ``dtype`` in memory."""
    return numpy_dtype(dtype).itemsize


def compute_dtype(dtype) -> str:
    """The type the kernels compute and accumulate ``dtype`` data in: float32 for the 2-byte
    types, the type itself otherwise."""
    name = dtype_name(dtype)
    return "float32" if name in HALF_DTYPES else name


def is_real_float(dtype) -> bool:
    """Whether ``dtype`` is a real floating-point type.  NumPy files bfloat16 under kind ``"V"``
    (a user-defined type), so the kind alone does not say it."""
    dtype = numpy_dtype(dtype)
    return dtype.kind == "f" or dtype.name == "bfloat16"
