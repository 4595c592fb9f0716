"""How results are judged, in one place for the tests, the demo and the profiler.

Error is ``||out - ref|| / ||ref||`` against a float64 reference.  float32 and float64 results must
land under fixed bounds far above their rounding; a float16 or bfloat16 result must be within 2x
the error of the float64 reference itself rounded to that type (the best a 2-byte output can do),
plus a floor for results whose norm is tiny.  bfloat16 arrays are built on the host with
``ml_dtypes.bfloat16`` (through :mod:`cupyconv._core.dtypes`, which imports it on first use).
"""

from __future__ import annotations

import numpy as np

from cupyconv._core.dtypes import HALF_DTYPES, dtype_name, numpy_dtype

TOLERANCE = {"float32": 1e-5, "float64": 1e-12}
HALF_FACTOR = 2.0  # a 2-byte result may be this many times as far off as the rounded reference
HALF_FLOOR = 1e-6
# The relative difference allowed between two GPU results of one problem (the tuner's check of
# each candidate against the direct kernel): both are rounded to the output type, so 2-byte
# results may differ by an ulp per element (2**-11 for float16, 2**-8 for bfloat16: 8x apart).
AGREEMENT = {"float16": 1e-2, "bfloat16": 8e-2, "float32": 100 * TOLERANCE["float32"],
             "float64": 100 * TOLERANCE["float64"]}
TF32_FACTOR = 2.0


def to_numpy(a) -> np.ndarray:
    return a.get() if hasattr(a, "get") else np.asarray(a)


def rel_error(out, ref) -> float:
    """||out - ref|| / ||ref|| in float64 (inf when ``out`` holds NaN or inf)."""
    out = to_numpy(out).astype(np.float64)
    ref = to_numpy(ref).astype(np.float64)
    if out.shape != ref.shape:
        raise ValueError(f"shape mismatch: {out.shape} vs reference {ref.shape}")
    if not np.all(np.isfinite(out)):
        return float("inf")
    denom = np.linalg.norm(ref.ravel())
    return float(np.linalg.norm((out - ref).ravel()) / (denom if denom > 0 else 1.0))


def tolerance(dtype, ref) -> float:
    """Largest acceptable :func:`rel_error` of a ``dtype`` result against the float64 ``ref``."""
    name = dtype_name(dtype)
    if name in HALF_DTYPES:
        ref = to_numpy(ref).astype(np.float64)
        return HALF_FACTOR * rel_error(ref.astype(numpy_dtype(name)), ref) + HALF_FLOOR
    return TOLERANCE[name]


def round_tf32(a) -> np.ndarray:
    """float32 values rounded to TF32 as the tensor-core path rounds its inputs (``cvt.rna``: 10
    explicit mantissa bits, nearest, ties away from zero); inf and NaN kept."""
    a = np.asarray(to_numpy(a), np.float32)
    bits = a.view(np.uint32)
    rounded = ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isfinite(a), rounded, a)


def tf32_tolerance(ref, ref_of_rounded) -> float:
    """Largest acceptable :func:`rel_error` of a TF32 result against the float64 ``ref``: 2x the
    error of the float64 computation on TF32-rounded inputs (``ref_of_rounded``: the best a
    TF32 product can do), plus a floor for float32 accumulation."""
    return TF32_FACTOR * rel_error(ref_of_rounded, ref) + 1e-6


def random_array(rng: np.random.Generator, shape, dtype="float32") -> np.ndarray:
    """Uniform(-1, 1) values, never all zero, rounded to ``dtype`` (bfloat16 included)."""
    return rng.uniform(-1.0, 1.0, size=shape).astype(numpy_dtype(dtype))


def poison(a):
    """Fill ``a`` with NaN so that any element a kernel fails to write shows as an error."""
    a.fill(np.nan)
    return a


def scipy_conv(x, w, geom) -> np.ndarray:
    """Forward convolution built only from ``scipy.signal.correlate``: an oracle independent of
    :mod:`cupyconv.reference`.  Each output channel is the sum over its group's input channels of a
    'valid' correlation of the zero-padded input with the dilated kernel, subsampled by the stride.
    """
    from scipy import signal

    x = to_numpy(x).astype(np.float64)
    w = to_numpy(w).astype(np.float64)
    if geom.channels_last:
        x, w = np.moveaxis(x, -1, 1), np.moveaxis(w, -1, 1)
    x = np.pad(x, [(0, 0), (0, 0)] + list(zip(geom.pad_lo, geom.pad_hi)))
    dilated = np.zeros(w.shape[:2] + tuple((k - 1) * d + 1 for k, d in zip(geom.kernel, geom.dilation)))
    dilated[(slice(None), slice(None)) + tuple(slice(None, None, d) for d in geom.dilation)] = w
    cpg, kpg = geom.in_channels // geom.groups, geom.out_channels // geom.groups
    sub = tuple(slice(None, o * s, s) for o, s in zip(geom.out_spatial, geom.stride))
    y = np.zeros((geom.batch, geom.out_channels) + geom.out_spatial)
    for n in range(geom.batch):
        for k in range(geom.out_channels):
            g = k // kpg
            acc = sum(signal.correlate(x[n, g * cpg + c], dilated[k, c], mode="valid")
                      for c in range(cpg))
            y[n, k] = acc[sub]
    return np.moveaxis(y, 1, -1) if geom.channels_last else y
