"""Dtype rules of cupyconv.ndimage, SciPy's: the output takes the input's dtype (complex when the
input or the weights are, promoted with complex64), and values are computed in float64 unless
both sides are single precision."""

from __future__ import annotations

import numpy as np

# storage dtype -> the C++ type the kernels read and write it as
ND_CTYPES = {
    "uint8": "unsigned char", "int8": "signed char", "uint16": "unsigned short", "int16": "short",
    "uint32": "unsigned int", "int32": "int", "uint64": "unsigned long long", "int64": "long long",
    "float32": "float", "float64": "double",
    "complex64": "nd::complex<float>", "complex128": "nd::complex<double>",
}
STORAGE_DTYPES = tuple(ND_CTYPES)

SINGLE = ("float32", "complex64")


def check_input_dtype(dtype, name: str = "input") -> str:
    """The dtype name of an input, or a TypeError naming the supported ones (SciPy also takes
    bool and float16; cupyconv does not)."""
    d = np.dtype(dtype).name
    if d not in ND_CTYPES:
        raise TypeError(f"{name} has dtype {d}; cupyconv.ndimage supports "
                        f"{', '.join(ND_CTYPES)} (cast first, e.g. {name}.astype(cupy.float32))")
    return d


def compute_dtype(in_dtype: str, out_dtype: str, complex_weights: bool) -> str:
    """The kernel's compute type for this input and output: float32 where both are single
    precision (within float32 rounding of SciPy's float64 sums), float64 otherwise (integers
    then truncate exactly as SciPy's do); complex where input, output or weights are."""
    cplx = complex_weights or np.dtype(in_dtype).kind == "c" or np.dtype(out_dtype).kind == "c"
    single = in_dtype in SINGLE and out_dtype in SINGLE
    if cplx:
        return "complex64" if single else "complex128"
    return "float32" if single else "float64"


def default_output_dtype(in_dtype: str, complex_output: bool) -> np.dtype:
    """SciPy's ``_get_output`` for ``output=None``."""
    if not complex_output:
        return np.dtype(in_dtype)
    return np.promote_types(in_dtype, np.complex64)
