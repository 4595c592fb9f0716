"""SciPy's dtype rules for the signal API: which operand dtypes it computes with, the result and
FFT dtypes of a pair, the type the kernels compute in, where SciPy itself takes NumPy's loop, and
the cast of ``fillvalue`` (pure NumPy; :mod:`cupyconv._signal.plan` applies them to a plan)."""

from __future__ import annotations

import warnings

import numpy as np


def check_dtype(dtype, name: str) -> np.dtype:
    """``dtype`` if the signal API can compute with it (bool, integers, float16-64, complex).

    bfloat16 is refused: the API follows SciPy's dtype rules, and SciPy (NumPy) has no bfloat16
    (ml_dtypes files it under kind "V", so the kind test below catches it)."""
    dtype = np.dtype(dtype)
    if dtype.kind not in "biufc" or dtype.itemsize > (16 if dtype.kind == "c" else 8):
        hint = (f" (SciPy has no bfloat16: cast with {name}.astype(cupy.float32))"
                if dtype.name == "bfloat16" else "")
        raise TypeError(f"{name} has dtype {dtype.name}; supported are bool, integers, float16, "
                        f"float32, float64, complex64 and complex128" + hint)
    return dtype


def result_dtype(dtype1, dtype2) -> np.dtype:
    """dtype of ``correlate``/``convolve``/``correlate2d`` results: NumPy's promotion, as SciPy."""
    return np.result_type(dtype1, dtype2)


def fft_dtype(dtype) -> np.dtype:
    """Real or complex type in which ``scipy.fft`` transforms an array of ``dtype``."""
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return dtype
    return np.dtype(np.float32) if dtype in (np.float16, np.float32) else np.dtype(np.float64)


def fftconvolve_dtype(dtype1, dtype2) -> np.dtype:
    """dtype of ``fftconvolve`` results, and the precision of every FFT path of SciPy: each
    operand transformed in its ``scipy.fft`` type (integers and bool as float64, float16 as
    float32), the product promoted."""
    return np.result_type(fft_dtype(dtype1), fft_dtype(dtype2))


def compute_dtype(result: np.dtype) -> str:
    """The kernel type for a result dtype: integers wrap in uint64 (exact, like SciPy's integer
    loops), float16 computes in float32."""
    result = np.dtype(result)
    if result.kind in "biu":
        return "uint64"
    if result == np.float16:
        return "float32"
    return result.name


NUMPY_LOOP_DTYPES = (np.dtype(np.bool_), np.dtype(np.float16))


def numpy_direct_path(func: str, shape1, shape2, mode: str) -> bool:
    """Whether SciPy's ``method='direct'`` hands these operands to ``np.convolve`` /
    ``np.correlate`` (which take every dtype): 1-d operands, and in 'same' mode only where ``in1``
    is at least as long as ``in2`` (NumPy's 'same' follows the longer operand)."""
    if func not in ("correlate", "convolve") or not len(shape1) == len(shape2) == 1:
        return False
    return mode != "same" or shape1[0] >= shape2[0]


def check_direct_dtype(result: np.dtype, func: str, numpy_path: bool = False) -> None:
    """SciPy's direct N-d and 2-d loops refuse bool x bool and float16 results; so do we, except
    where SciPy goes through NumPy's 1-d loops (``numpy_path``, :func:`numpy_direct_path`)."""
    if np.dtype(result) in NUMPY_LOOP_DTYPES and not numpy_path:
        raise ValueError(f"{func} with method='direct' does not support inputs whose result dtype "
                         f"is {np.dtype(result).name} (SciPy: Unsupported type; {func} not "
                         f"available for this type); cast the inputs or use method='fft'")


_FILL_CAST_ERRORS = (TypeError, ValueError, OverflowError)


def check_fillvalue(fillvalue, result: np.dtype):
    """``fillvalue`` as a NumPy scalar of the result dtype, by SciPy's rule for
    ``correlate2d``/``convolve2d`` (which read it only for boundary 'fill'): an array must cast
    safely to the result dtype; a Python or NumPy scalar (or a list, or a string) converts as
    ``numpy.array(fillvalue, dtype)`` does, so None is NaN for float results.  Where that fails,
    SciPy tries complex: what is no number then (``'a'``, an object) raises that conversion's
    ``ValueError``/``TypeError``, anything else (an integer out of the result type's range, a NaN
    or None for an integer result, a negative value for an unsigned one, a complex value for a
    real one) ``ValueError`` ("could not cast fillvalue").  Then it must hold exactly one
    element."""
    result = np.dtype(result)
    try:
        if isinstance(fillvalue, np.ndarray):
            if not np.can_cast(fillvalue.dtype, result, "safe"):
                raise TypeError("not a safe cast")
            fv = fillvalue.astype(result)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # NumPy scalars cast like C, as in SciPy
                fv = np.array(fillvalue, dtype=result)
    except _FILL_CAST_ERRORS:
        try:
            np.asarray(fillvalue, dtype=np.complex128)
        except _FILL_CAST_ERRORS as exc:  # not a number at all (SciPy: this conversion's error)
            raise type(exc)(f"fillvalue {fillvalue!r} is not a number: {exc}") from None
        raise ValueError(f"fillvalue {fillvalue!r}: could not cast `fillvalue` directly to the "
                         f"output type {result.name} (SciPy's rule: it must convert to the "
                         f"result dtype without overflow)") from None
    if fv.size == 0:
        raise ValueError("fillvalue: `fillvalue` cannot be an empty array.")
    if fv.size != 1:
        raise ValueError(f"fillvalue: `fillvalue` must be scalar or an array with one element, "
                         f"got shape {fv.shape}")
    return fv.reshape(())[()]
